"""Decode attention in Triton: split-KV (flash-decoding) with a combine step.

One query token per sequence reads its whole KV cache: the work is memory-bound, so the design
goal is every byte of K and V read once, with enough loads in flight to saturate HBM.

- One program per (sequence, KV head, split of the sequence). The query heads that share a KV head
  (GQA) are processed together as the rows of one small tile, so K and V are read once per group,
  not once per query head; the tile is padded to 16 rows, the smallest tensor-core shape.
- Splits: the sequences times KV heads alone may not fill the GPU (batch 1 at 32k has 8 programs
  for 132 SMs), and long sequences next to short ones leave SMs idle. The cache is cut into up to
  ``num_splits`` chunks so there are about 8 programs per SM; chunks are at least 512 tokens (256
  KB of K and V at dim 128) so the per-split overhead (a partial result of 16 rows) stays small.
  Lengths live on the device: splits past a sequence's end exit at once, and no host sync is made
  (CUDA-graph safe).
- Each split writes a normalised partial output and its log2-sum-exp in float32; a second kernel
  merges the splits of each (sequence, query head). With one split the first kernel writes the
  final output itself.
- K/V loads are masked pointer loads, software-pipelined by ``num_stages`` (cp.async on sm_80+):
  3 stages of 64 x dim tiles keep ~64 KB per program in flight, three programs per SM.
- On the CPU interpreter bfloat16 dots widen to float32 first (``DOT_F32``), as in
  ``attention_prefill``: the interpreter multiplies bfloat16 bit patterns
  (triton-lang/triton#11584).

A sequence of length 0 gets o = 0 and lse = -inf. lse is natural-log, float32.
"""

import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634
_MIN_CHUNK = 512
_PROGRAMS_PER_SM = 8
_SM_COUNT: dict[int, int] = {}


@triton.jit(do_not_specialize=["stride_lb", "kv_heads", "group", "max_seq", "chunk", "num_splits"])
def _decode_split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    seq_lens_ptr,
    o_ptr,
    lse_ptr,
    part_o_ptr,
    part_lse_ptr,
    stride_qb,
    stride_qh,
    stride_kb,
    stride_kh,
    stride_ks,
    stride_vb,
    stride_vh,
    stride_vs,
    stride_ob,
    stride_oh,
    stride_lb,
    stride_lh,
    kv_heads,
    group,
    max_seq,
    chunk,
    num_splits,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE_SPLIT: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    pid = tl.program_id(0)
    split = pid % num_splits
    batch_kv = pid // num_splits
    batch = (batch_kv // kv_heads).to(tl.int64)
    kv_head = (batch_kv % kv_heads).to(tl.int64)
    seq_len = tl.minimum(tl.load(seq_lens_ptr + batch), max_seq)  # never read past the cache
    start = split * chunk
    stop = tl.minimum(seq_len, start + chunk)

    rows = tl.arange(0, GROUP_PAD)  # query heads kv_head * group + rows
    dims = tl.arange(0, HEAD_DIM)
    heads = kv_head * group + rows
    q = tl.load(
        q_ptr + batch * stride_qb + heads[:, None] * stride_qh + dims[None, :],
        mask=rows[:, None] < group,
        other=0.0,
    )
    if DOT_F32:
        q = q.to(tl.float32)
    k_base = k_ptr + batch * stride_kb + kv_head * stride_kh
    v_base = v_ptr + batch * stride_vb + kv_head * stride_vh

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    for start_n in tl.range(start, stop, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        inside = cols < stop
        k = tl.load(
            k_base + cols[:, None] * stride_ks + dims[None, :], mask=inside[:, None], other=0.0
        )
        k_t = tl.trans(k)
        if DOT_F32:
            k_t = k_t.to(tl.float32)
        qk = tl.dot(q, k_t)
        # Every row shares the column mask and each visited block has a key inside: m stays finite.
        qk = tl.where(inside[None, :], qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        v = tl.load(
            v_base + cols[:, None] * stride_vs + dims[None, :], mask=inside[:, None], other=0.0
        )
        if DOT_F32:
            acc = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), acc * alpha[:, None])
        else:
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new

    seen = l_i > 0.0
    l_safe = tl.where(seen, l_i, 1.0)
    out = acc / l_safe[:, None]
    lse2 = tl.where(seen, m_i + tl.math.log2(l_safe), float("-inf"))
    valid = rows < group
    if SINGLE_SPLIT:
        tl.store(
            o_ptr + batch * stride_ob + heads[:, None] * stride_oh + dims[None, :],
            out.to(o_ptr.dtype.element_ty),
            mask=valid[:, None],
        )
        tl.store(
            lse_ptr + batch * stride_lb + heads * stride_lh, lse2 * 0.6931471805599453, mask=valid
        )
    else:
        # Partials: [batch, q_heads, num_splits, dim] and [batch, q_heads, num_splits], contiguous.
        slot = (batch * kv_heads * group + heads) * num_splits + split
        tl.store(part_o_ptr + slot[:, None] * HEAD_DIM + dims[None, :], out, mask=valid[:, None])
        tl.store(part_lse_ptr + slot, lse2, mask=valid)


@triton.jit(do_not_specialize=["stride_lb", "q_heads", "num_splits"])
def _decode_combine_kernel(
    part_o_ptr,
    part_lse_ptr,
    o_ptr,
    lse_ptr,
    stride_ob,
    stride_oh,
    stride_lb,
    stride_lh,
    q_heads,
    num_splits,
    HEAD_DIM: tl.constexpr,
    SPLITS_PAD: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)  # batch * q_heads + head
    batch = pid // q_heads
    head = pid % q_heads
    splits = tl.arange(0, SPLITS_PAD)
    dims = tl.arange(0, HEAD_DIM)
    lse2 = tl.load(
        part_lse_ptr + pid * num_splits + splits, mask=splits < num_splits, other=float("-inf")
    )
    top = tl.max(lse2, 0)
    top_safe = tl.where(top == float("-inf"), 0.0, top)
    weights = tl.math.exp2(lse2 - top_safe)  # splits that saw no key weigh 0
    total = tl.sum(weights, 0)
    parts = tl.load(
        part_o_ptr + (pid * num_splits + splits)[:, None] * HEAD_DIM + dims[None, :],
        mask=(splits < num_splits)[:, None] & (weights > 0.0)[:, None],
        other=0.0,
    )
    total_safe = tl.where(total > 0.0, total, 1.0)
    out = tl.sum(parts * weights[:, None], 0) / total_safe
    lse = tl.where(
        total > 0.0, (top_safe + tl.math.log2(total_safe)) * 0.6931471805599453, float("-inf")
    )
    tl.store(o_ptr + batch * stride_ob + head * stride_oh + dims, out.to(o_ptr.dtype.element_ty))
    tl.store(lse_ptr + batch * stride_lb + head * stride_lh, lse)


def _sm_count(device: torch.device) -> int:
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNT[index]


def _num_splits(batch: int, kv_heads: int, max_seq: int, device: torch.device) -> int:
    if device.type != "cuda":
        return min(3, triton.cdiv(max_seq, 16))  # exercise the combine on CPU too
    wanted = triton.cdiv(_PROGRAMS_PER_SM * _sm_count(device), max(1, batch * kv_heads))
    return max(1, min(wanted, triton.cdiv(max_seq, _MIN_CHUNK)))


def run(q, k_cache, v_cache, seq_lens, sm_scale, o, lse):
    launch(q, k_cache, v_cache, seq_lens, sm_scale, o, lse)


def launch(q, k_cache, v_cache, seq_lens, sm_scale, o, lse, num_splits=None, config=None):
    """``run`` with the split count and ``config`` (BLOCK_N, num_warps, num_stages) open."""
    batch, q_heads, head_dim = q.shape
    kv_heads, max_seq = k_cache.shape[1], k_cache.shape[2]
    if head_dim not in (64, 128) or kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(
            f"attention_decode: head_dim {head_dim} (64 or 128) and q_heads {q_heads} "
            f"a multiple of kv_heads {kv_heads} are required"
        )
    if any(t.stride(-1) != 1 for t in (q, k_cache, v_cache, o)):
        raise ValueError(
            "attention_decode: the last dimension of q, the caches and o must be contiguous"
        )
    if batch == 0 or q_heads == 0:
        return
    group = q_heads // kv_heads
    if config is None:
        on_cpu = not q.is_cuda
        config = {"BLOCK_N": 16 if on_cpu else 64, "num_warps": 4, "num_stages": 1 if on_cpu else 3}
    if num_splits is None:
        num_splits = _num_splits(batch, kv_heads, max_seq, q.device)
    block_n = config["BLOCK_N"]
    chunk = triton.cdiv(triton.cdiv(max(max_seq, 1), num_splits), block_n) * block_n
    num_splits = max(1, triton.cdiv(max_seq, chunk))
    single = num_splits == 1
    if single:
        part_o = part_lse = o  # unused
    else:
        part_o = torch.empty(
            batch, q_heads, num_splits, head_dim, dtype=torch.float32, device=q.device
        )
        part_lse = torch.empty(batch, q_heads, num_splits, dtype=torch.float32, device=q.device)
    dot_f32 = not q.is_cuda and q.dtype == torch.bfloat16
    _decode_split_kernel[(batch * kv_heads * num_splits,)](
        q,
        k_cache,
        v_cache,
        seq_lens,
        o,
        lse,
        part_o,
        part_lse,
        *q.stride()[:2],
        *k_cache.stride()[:3],
        *v_cache.stride()[:3],
        *o.stride()[:2],
        *lse.stride(),
        kv_heads,
        group,
        max_seq,
        chunk,
        num_splits,
        float(sm_scale) * _LOG2E,
        HEAD_DIM=head_dim,
        GROUP_PAD=max(16, triton.next_power_of_2(group)),
        BLOCK_N=block_n,
        SINGLE_SPLIT=single,
        DOT_F32=dot_f32,
        num_warps=config["num_warps"],
        num_stages=config["num_stages"],
    )
    if not single:
        _decode_combine_kernel[(batch * q_heads,)](
            part_o,
            part_lse,
            o,
            lse,
            *o.stride()[:2],
            *lse.stride(),
            q_heads,
            num_splits,
            HEAD_DIM=head_dim,
            SPLITS_PAD=max(2, triton.next_power_of_2(num_splits)),
            num_warps=4,
        )
