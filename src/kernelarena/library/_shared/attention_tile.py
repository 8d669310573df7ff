"""The tile loop of the library's Triton prefill attention (attention_prefill and
attention_prefill_varlen): one query block of one head against its keys, FlashAttention-2's online
softmax.

- Scores are kept in the log2 domain (``qk_scale`` = ``sm_scale * log2(e)``, folded into one
  multiply-add) so the exponentials are ``exp2``, one MUFU instruction each.
- The key range splits in two loops: blocks every row of the query block sees in full (no mask, no
  select) and the few blocks that cross the causal diagonal or the end of the keys (masked). Causal
  masking is aligned to the bottom-right: query i sees keys j <= i + seq_kv - seq_q, as
  FlashAttention does; a query that sees no key gets o = 0 and lse = -inf.
- With USE_TMA the tiles come through 2-D tensor descriptors built here over the head's own rows
  (``kv_rows`` keys: at least 1, so a descriptor stays well-formed where there are none), so tails
  read zeros from the hardware and a tile never spills into the next head or sequence; otherwise
  masked pointer loads. DOT_F32 widens the dot operands to float32 after the same rounding of P
  (Triton's CPU interpreter multiplies the bit patterns of bfloat16 operands,
  triton-lang/triton#11584).

The host side both solutions share: the launch plan (``launch_config``) and whether the tiles can
come through TMA (``tma_usable``, ``allocate_descriptors``).
"""

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
# In-kernel TMA descriptors (public since Triton 3.4); older Tritons take the pointer path.
HAS_DEVICE_DESCRIPTORS = hasattr(tl, "make_tensor_descriptor") and hasattr(triton, "set_allocator")


@triton.jit
def attend_range(
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


@triton.jit
def attend_query_block(
    q_base,
    k_base,
    v_base,
    o_base,
    kv_rows,
    seq_q,
    seq_kv,
    start_m,
    qk_scale,
    stride_qs,
    stride_ks,
    stride_vs,
    stride_os,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    USE_TMA: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """Rows [start_m, start_m + BLOCK_M) of a head's queries (``*_base``: its q, k, v and o, rows
    ``stride_*s`` apart): stores o, returns the rows and their natural-log lse."""
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    if USE_TMA:
        q_desc = tl.make_tensor_descriptor(
            q_base, [seq_q, HEAD_DIM], [stride_qs, 1], [BLOCK_M, HEAD_DIM]
        )
        k_src = tl.make_tensor_descriptor(
            k_base, [kv_rows, HEAD_DIM], [stride_ks, 1], [BLOCK_N, HEAD_DIM]
        )
        v_src = tl.make_tensor_descriptor(
            v_base, [kv_rows, HEAD_DIM], [stride_vs, 1], [BLOCK_N, HEAD_DIM]
        )
        q = q_desc.load([start_m, 0])
    else:
        k_src = k_base
        v_src = v_base
        q = tl.load(
            q_base + rows[:, None] * stride_qs + dims[None, :],
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
    acc, m_i, l_i = attend_range(
        acc, m_i, l_i, q, k_src, v_src, rows, 0, full_stop, seq_kv, diagonal, qk_scale,
        stride_ks, stride_vs, BLOCK_N, HEAD_DIM, False, CAUSAL, USE_TMA, DOT_F32,
    )  # fmt: skip
    acc, m_i, l_i = attend_range(
        acc, m_i, l_i, q, k_src, v_src, rows, full_stop, stop, seq_kv, diagonal, qk_scale,
        stride_ks, stride_vs, BLOCK_N, HEAD_DIM, True, CAUSAL, USE_TMA, DOT_F32,
    )  # fmt: skip

    seen = l_i > 0.0
    l_safe = tl.where(seen, l_i, 1.0)
    o = (acc / l_safe[:, None]).to(o_base.dtype.element_ty)  # rows that saw no key: acc = 0
    lse = tl.where(seen, (m_i + tl.math.log2(l_safe)) * 0.6931471805599453, float("-inf"))
    if USE_TMA:
        o_desc = tl.make_tensor_descriptor(
            o_base, [seq_q, HEAD_DIM], [stride_os, 1], [BLOCK_M, HEAD_DIM]
        )
        o_desc.store([start_m, 0], o)
    else:
        tl.store(o_base + rows[:, None] * stride_os + dims[None, :], o, mask=rows[:, None] < seq_q)
    return rows, lse


# -- host side ---------------------------------------------------------------------------------


def check_heads(op: str, head_dim: int, q_heads: int, kv_heads: int, q, k, v, o) -> None:
    """The shapes both kernels take: head_dim 64 or 128, whole query groups, unit last strides."""
    if head_dim not in (64, 128) or kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(
            f"{op}: head_dim {head_dim} (64 or 128) and q_heads {q_heads} "
            f"a multiple of kv_heads {kv_heads} are required"
        )
    if any(t.stride(-1) != 1 for t in (q, k, v, o)):
        raise ValueError(f"{op}: the last dimension of q, k, v and o must be contiguous")


def launch_config(head_dim: int, seq_q: float, device: torch.device) -> dict:
    """BLOCK_M, BLOCK_N, num_warps and num_stages for sequences of ``seq_q`` queries (the mean
    length where they vary)."""
    if device.type != "cuda":
        # The interpreter runs each tile op in numpy: small tiles keep CPU tests quick.
        return {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1}
    if seq_q <= 64:
        return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
    if torch.cuda.get_device_capability(device)[0] >= 9:
        # Two warpgroups, each a 64-row wgmma slice of a 128 x 128 score tile. Shared memory per
        # stage: K and V tiles of 128 x dim x 2 bytes (64 KB at dim 128, so 2 stages + Q = 160 KB
        # of the 227 KB an SM offers; 3 stages at dim 64).
        return {
            "BLOCK_M": 128,
            "BLOCK_N": 128,
            "num_warps": 8,
            "num_stages": 2 if head_dim == 128 else 3,
        }
    return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}


def tma_usable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor) -> bool:
    """Whether the tiles can come through TMA: sm_90 or later, in-kernel descriptors, and a
    16-byte aligned base per (sequence, head) and 16-byte aligned row strides."""
    if not (
        q.is_cuda and HAS_DEVICE_DESCRIPTORS and torch.cuda.get_device_capability(q.device)[0] >= 9
    ):
        return False
    for t in (q, k, v, o):
        if t.data_ptr() % 16 or any((s * t.element_size()) % 16 for s in t.stride()[:-1]):
            return False
    return True


def allocate_descriptors(device: torch.device) -> None:
    """Device-side descriptors live in a global scratch that Triton asks the allocator for."""
    triton.set_allocator(
        lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=device)
    )
