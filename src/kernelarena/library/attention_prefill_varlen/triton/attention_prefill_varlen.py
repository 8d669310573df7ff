"""Variable-length (packed) prefill attention in Triton: the loop of ``attention_prefill``'s
Triton solution over sequences packed along one axis with offsets, as FlashAttention's
``flash_attn_varlen_func`` and FlashInfer's ragged prefill take them.

- q [total_q, q_heads, dim], k and v [total_kv, kv_heads, dim]; sequence i holds tokens
  cu_seqlens_q[i]:cu_seqlens_q[i+1] of q and cu_seqlens_k[i]:cu_seqlens_k[i+1] of k and v.
- One program per (block of queries of one sequence, query head). The grid is sized without
  reading the offsets on the host (no device-to-host sync, CUDA-graph safe): the sum over
  sequences of ceil(len_i / BLOCK_M) is at most ceil(total_q / BLOCK_M) + batch; each program
  finds its sequence from a prefix sum of those block counts, and the spare programs exit.
- On sm_90 each program builds TMA descriptors over its own sequence and head, so tiles past a
  sequence's end read zeros from the hardware and stores stop at the sequence's end: no masks,
  and no token of a neighbouring sequence is read or written.
- Causal masking is bottom-right per sequence (query i of a sequence sees keys
  j <= i + len_k - len_q); a query that sees no key gets o = 0 and lse = -inf. lse is natural-log,
  float32, laid out [total_q, q_heads] (FlashInfer's layout).
- On the CPU interpreter bfloat16 dots widen to float32 first (``DOT_F32``), as in
  ``attention_prefill``: the interpreter multiplies bfloat16 bit patterns
  (triton-lang/triton#11584).
- The block loop below is ``attention_prefill``'s, duplicated on purpose: a solution's files must
  stand alone.
"""

import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634
# In-kernel TMA descriptors (public since Triton 3.4); older Tritons take the pointer path.
_HAS_DEVICE_DESCRIPTORS = hasattr(tl, "make_tensor_descriptor") and hasattr(triton, "set_allocator")


@triton.jit
def _attend_range(
    acc,
    m_i,
    l_i,
    q,
    k_src,
    v_src,
    rows,
    start,
    stop,
    seq_kv,
    diagonal,
    qk_scale,
    stride_ks,
    stride_vs,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    USE_TMA: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """Online softmax over keys [start, stop); ``m_i`` is the running row maximum in log2 units,
    ``l_i`` the running row sum of exp2(score - m_i)."""
    dims = tl.arange(0, HEAD_DIM)
    for start_n in tl.range(start, stop, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + tl.arange(0, BLOCK_N)
        if USE_TMA:
            k = k_src.load([start_n, 0])
        elif MASKED:
            k = tl.load(
                k_src + cols[:, None] * stride_ks + dims[None, :],
                mask=cols[:, None] < seq_kv,
                other=0.0,
            )
        else:
            k = tl.load(k_src + cols[:, None] * stride_ks + dims[None, :])
        k_t = tl.trans(k)
        if DOT_F32:
            k_t = k_t.to(tl.float32)
        qk = tl.dot(q, k_t)
        if MASKED:
            visible = cols[None, :] < seq_kv
            if CAUSAL:
                visible = visible & (cols[None, :] <= rows[:, None] + diagonal)
            qk = tl.where(visible, qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            # A row that has seen no key yet keeps m = -inf; subtract 0 there, not -inf (NaN).
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.math.exp2(qk - m_use[:, None])
            alpha = tl.math.exp2(m_i - m_use)
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.math.exp2(qk * qk_scale - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
        acc = acc * alpha[:, None]
        if USE_TMA:
            v = v_src.load([start_n, 0])
        elif MASKED:
            v = tl.load(
                v_src + cols[:, None] * stride_vs + dims[None, :],
                mask=cols[:, None] < seq_kv,
                other=0.0,
            )
        else:
            v = tl.load(v_src + cols[:, None] * stride_vs + dims[None, :])
        if DOT_F32:
            acc = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), acc)
        else:
            acc = tl.dot(p.to(v.dtype), v, acc)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
    return acc, m_i, l_i


# Counts and the lse row stride (q_heads) are not specialized: fewer binaries.
@triton.jit(do_not_specialize=["stride_lt", "batch", "q_heads", "group"])
def _varlen_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    cu_q_ptr,
    cu_k_ptr,
    o_ptr,
    lse_ptr,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    batch,
    q_heads,
    group,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BATCH_PAD: tl.constexpr,
    CAUSAL: tl.constexpr,
    USE_TMA: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    slot = tl.program_id(0)
    head = tl.program_id(1)
    # Which sequence and which of its query blocks this program owns.
    seqs = tl.arange(0, BATCH_PAD)
    starts = tl.load(cu_q_ptr + seqs, mask=seqs < batch, other=0)
    ends = tl.load(cu_q_ptr + seqs + 1, mask=seqs < batch, other=0)
    blocks = (ends - starts + BLOCK_M - 1) // BLOCK_M
    blocks_through = tl.cumsum(blocks, 0)
    seq = tl.sum((blocks_through <= slot).to(tl.int32), 0)
    if seq >= batch:
        return
    first_slot = tl.sum(tl.where(seqs < seq, blocks, 0), 0)
    block_m = slot - first_slot
    q_start = tl.load(cu_q_ptr + seq)
    seq_q = tl.load(cu_q_ptr + seq + 1) - q_start
    k_start = tl.load(cu_k_ptr + seq)
    seq_kv = tl.load(cu_k_ptr + seq + 1) - k_start
    if CAUSAL:  # heaviest query blocks of the sequence first
        block_m = (seq_q + BLOCK_M - 1) // BLOCK_M - 1 - block_m

    kv_head = (head // group).to(tl.int64)
    head = head.to(tl.int64)
    q_base = q_ptr + q_start.to(tl.int64) * stride_qt + head * stride_qh
    k_base = k_ptr + k_start.to(tl.int64) * stride_kt + kv_head * stride_kh
    v_base = v_ptr + k_start.to(tl.int64) * stride_vt + kv_head * stride_vh
    o_base = o_ptr + q_start.to(tl.int64) * stride_ot + head * stride_oh
    start_m = block_m * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    if USE_TMA:
        # A sequence with no keys never loads; its descriptors get one row to stay well-formed.
        kv_rows = tl.maximum(seq_kv, 1)
        q_desc = tl.make_tensor_descriptor(
            q_base, [seq_q, HEAD_DIM], [stride_qt, 1], [BLOCK_M, HEAD_DIM]
        )
        k_src = tl.make_tensor_descriptor(
            k_base, [kv_rows, HEAD_DIM], [stride_kt, 1], [BLOCK_N, HEAD_DIM]
        )
        v_src = tl.make_tensor_descriptor(
            v_base, [kv_rows, HEAD_DIM], [stride_vt, 1], [BLOCK_N, HEAD_DIM]
        )
        q = q_desc.load([start_m, 0])
    else:
        k_src = k_base
        v_src = v_base
        q = tl.load(
            q_base + rows[:, None] * stride_qt + dims[None, :],
            mask=rows[:, None] < seq_q,
            other=0.0,
        )
    if DOT_F32:
        q = q.to(tl.float32)

    diagonal = seq_kv - seq_q
    if CAUSAL:
        stop = tl.minimum(seq_kv, start_m + BLOCK_M + diagonal)
        full_stop = tl.minimum(seq_kv, start_m + diagonal + 1)
    else:
        stop = seq_kv
        full_stop = seq_kv
    stop = tl.maximum(stop, 0)
    full_stop = tl.maximum(full_stop, 0) // BLOCK_N * BLOCK_N

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    acc, m_i, l_i = _attend_range(
        acc,
        m_i,
        l_i,
        q,
        k_src,
        v_src,
        rows,
        0,
        full_stop,
        seq_kv,
        diagonal,
        qk_scale,
        stride_kt,
        stride_vt,
        BLOCK_N,
        HEAD_DIM,
        False,
        CAUSAL,
        USE_TMA,
        DOT_F32,
    )
    acc, m_i, l_i = _attend_range(
        acc,
        m_i,
        l_i,
        q,
        k_src,
        v_src,
        rows,
        full_stop,
        stop,
        seq_kv,
        diagonal,
        qk_scale,
        stride_kt,
        stride_vt,
        BLOCK_N,
        HEAD_DIM,
        True,
        CAUSAL,
        USE_TMA,
        DOT_F32,
    )

    seen = l_i > 0.0
    l_safe = tl.where(seen, l_i, 1.0)
    o = (acc / l_safe[:, None]).to(o_ptr.dtype.element_ty)
    lse = tl.where(seen, (m_i + tl.math.log2(l_safe)) * 0.6931471805599453, float("-inf"))
    if USE_TMA:
        o_desc = tl.make_tensor_descriptor(
            o_base, [seq_q, HEAD_DIM], [stride_ot, 1], [BLOCK_M, HEAD_DIM]
        )
        o_desc.store([start_m, 0], o)
    else:
        tl.store(o_base + rows[:, None] * stride_ot + dims[None, :], o, mask=rows[:, None] < seq_q)
    lse_rows = q_start.to(tl.int64) + rows
    tl.store(lse_ptr + lse_rows * stride_lt + head * stride_lh, lse, mask=rows < seq_q)


def _config(head_dim: int, mean_seq_q: float, device: torch.device) -> dict:
    if device.type != "cuda":
        return {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1}
    if mean_seq_q <= 64:
        return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
    if torch.cuda.get_device_capability(device)[0] >= 9:
        # As attention_prefill: 128 x 128 score tiles over two warpgroups.
        return {
            "BLOCK_M": 128,
            "BLOCK_N": 128,
            "num_warps": 8,
            "num_stages": 2 if head_dim == 128 else 3,
        }
    return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}


def _tma_ready(tensors: list[torch.Tensor]) -> bool:
    """TMA needs a 16-byte aligned base per (sequence, head) and 16-byte aligned row strides."""
    for t in tensors:
        if t.data_ptr() % 16 or any((s * t.element_size()) % 16 for s in t.stride()[:-1]):
            return False
    return True


def run(q, k, v, cu_seqlens_q, cu_seqlens_k, sm_scale, causal, o, lse):
    launch(q, k, v, cu_seqlens_q, cu_seqlens_k, sm_scale, causal, o, lse)


def launch(
    q, k, v, cu_seqlens_q, cu_seqlens_k, sm_scale, causal, o, lse, use_tma=None, config=None
):
    """``run`` with ``use_tma`` (None: wherever sm_90 and the strides allow) and ``config`` open."""
    total_q, q_heads, head_dim = q.shape
    kv_heads = k.shape[1]
    batch = cu_seqlens_q.shape[0] - 1
    if head_dim not in (64, 128) or kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(
            f"attention_prefill_varlen: head_dim {head_dim} (64 or 128) and q_heads {q_heads} "
            f"a multiple of kv_heads {kv_heads} are required"
        )
    if any(t.stride(-1) != 1 for t in (q, k, v, o)):
        raise ValueError(
            "attention_prefill_varlen: the last dimension of q, k, v and o must be contiguous"
        )
    if total_q == 0 or batch <= 0 or q_heads == 0:
        return
    config = config or _config(head_dim, total_q / batch, q.device)
    if use_tma is None:
        use_tma = (
            q.is_cuda
            and _HAS_DEVICE_DESCRIPTORS
            and torch.cuda.get_device_capability(q.device)[0] >= 9
            and _tma_ready([q, k, v, o])
        )
    if use_tma:
        # Device-side descriptors live in a global scratch that Triton asks the allocator for.
        triton.set_allocator(
            lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=q.device)
        )
    slots = triton.cdiv(total_q, config["BLOCK_M"]) + batch
    _varlen_kernel[(slots, q_heads)](
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        o,
        lse,
        *q.stride()[:2],
        *k.stride()[:2],
        *v.stride()[:2],
        *o.stride()[:2],
        *lse.stride(),
        batch,
        q_heads,
        q_heads // kv_heads,
        float(sm_scale) * _LOG2E,
        HEAD_DIM=head_dim,
        BLOCK_M=config["BLOCK_M"],
        BLOCK_N=config["BLOCK_N"],
        BATCH_PAD=max(16, triton.next_power_of_2(batch)),
        CAUSAL=bool(causal),
        USE_TMA=use_tma,
        DOT_F32=not q.is_cuda and q.dtype == torch.bfloat16,
        num_warps=config["num_warps"],
        num_stages=config["num_stages"],
    )
