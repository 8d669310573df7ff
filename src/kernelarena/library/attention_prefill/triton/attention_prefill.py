"""Prefill attention in Triton: FlashAttention-2's loop (one program per block of queries of one
head, an online softmax over blocks of keys), laid out for Hopper.

- The tile loop (attention_tile.py in library/_shared/, shared with attention_prefill_varlen):
  scores in the log2 domain, so the exponentials are ``exp2``; the key range in two loops, blocks
  every row sees in full (no mask) and the few that cross the causal diagonal or the end of the
  keys; causal masking aligned to the bottom-right (query i sees keys j <= i + seq_kv - seq_q); a
  query that sees no key gets o = 0 and lse = -inf.
- On sm_90 the tiles come through TMA: 2-D tensor descriptors per (batch, head) built in the kernel
  (``tl.make_tensor_descriptor``), whose bounds are the head's own sequence, so tails read zeros
  from the hardware instead of masked loads and a tile never spills into the next head. The loads
  are software-pipelined by ``num_stages``. Elsewhere (older GPUs, the CPU interpreter, misaligned
  strides) the same loop runs on masked pointer loads; on the interpreter bfloat16 dots widen to
  float32 first (``DOT_F32``, triton-lang/triton#11584).
- Causal programs run their heaviest query blocks first (longest-processing-time order), so the
  short diagonal blocks fill the tail of the grid.

lse is the natural-log log-sum-exp of the scaled scores, float32.
"""

import torch
import triton
import triton.language as tl

from ._shared.attention_tile import (
    LOG2E,
    allocate_descriptors,
    attend_query_block,
    check_heads,
    launch_config,
    tma_usable,
)


# Lengths, counts and lse strides (multiples of seq_q) are not specialized: one binary serves
# every sequence length.
@triton.jit(
    do_not_specialize=[
        "stride_lb",
        "stride_lh",
        "q_heads",
        "group",
        "seq_q",
        "seq_kv",
        "num_m_blocks",
    ]
)
def _prefill_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    lse_ptr,
    stride_qb,
    stride_qh,
    stride_qs,
    stride_kb,
    stride_kh,
    stride_ks,
    stride_vb,
    stride_vh,
    stride_vs,
    stride_ob,
    stride_oh,
    stride_os,
    stride_lb,
    stride_lh,
    stride_ls,
    q_heads,
    group,
    seq_q,
    seq_kv,
    qk_scale,
    num_m_blocks,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    USE_TMA: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    # One flat grid, query blocks of a head adjacent: the programs resident at once share their
    # head's K/V through L2 (a head's K and V at seq 4096, dim 128 are 2 MB; L2 is 50 MB).
    pid = tl.program_id(0)
    block_m = pid % num_m_blocks
    if CAUSAL:
        block_m = num_m_blocks - 1 - block_m
    batch_head = pid // num_m_blocks
    batch = (batch_head // q_heads).to(tl.int64)
    head = batch_head % q_heads
    kv_head = (head // group).to(tl.int64)
    head = head.to(tl.int64)
    q_base = q_ptr + batch * stride_qb + head * stride_qh
    k_base = k_ptr + batch * stride_kb + kv_head * stride_kh
    v_base = v_ptr + batch * stride_vb + kv_head * stride_vh
    o_base = o_ptr + batch * stride_ob + head * stride_oh
    rows, lse = attend_query_block(
        q_base, k_base, v_base, o_base, seq_kv, seq_q, seq_kv, block_m * BLOCK_M, qk_scale,
        stride_qs, stride_ks, stride_vs, stride_os, HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, USE_TMA,
        DOT_F32,
    )  # fmt: skip
    lse_base = lse_ptr + batch * stride_lb + head * stride_lh
    tl.store(lse_base + rows * stride_ls, lse, mask=rows < seq_q)


def run(q, k, v, sm_scale, causal, o, lse):
    launch(q, k, v, sm_scale, causal, o, lse)


def launch(q, k, v, sm_scale, causal, o, lse, use_tma=None, config=None):
    """``run`` with the choices open: ``use_tma`` (None: wherever sm_90 and the strides allow;
    tests force it on CPU, where the interpreter emulates descriptors) and ``config``
    (BLOCK_M, BLOCK_N, num_warps, num_stages; the benchmark's tuning sweep sets it)."""
    batch, q_heads, seq_q, head_dim = q.shape
    kv_heads, seq_kv = k.shape[1], k.shape[2]
    check_heads("attention_prefill", head_dim, q_heads, kv_heads, q, k, v, o)
    if batch == 0 or q_heads == 0 or seq_q == 0:
        return
    config = config or launch_config(head_dim, seq_q, q.device)
    if use_tma is None:
        use_tma = seq_kv > 0 and tma_usable(q, k, v, o)
    if use_tma:
        allocate_descriptors(q.device)
    num_m_blocks = triton.cdiv(seq_q, config["BLOCK_M"])
    grid = (num_m_blocks * batch * q_heads,)
    _prefill_kernel[grid](
        q,
        k,
        v,
        o,
        lse,
        *q.stride()[:3],
        *k.stride()[:3],
        *v.stride()[:3],
        *o.stride()[:3],
        *lse.stride(),
        q_heads,
        q_heads // kv_heads,
        seq_q,
        seq_kv,
        float(sm_scale) * LOG2E,
        num_m_blocks,
        HEAD_DIM=head_dim,
        BLOCK_M=config["BLOCK_M"],
        BLOCK_N=config["BLOCK_N"],
        CAUSAL=bool(causal),
        USE_TMA=use_tma,
        DOT_F32=not q.is_cuda and q.dtype == torch.bfloat16,
        num_warps=config["num_warps"],
        num_stages=config["num_stages"],
    )
