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
- The tile loop is ``attention_prefill``'s: attention_tile.py in library/_shared/, embedded in
  both solutions.
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
    # A sequence with no keys never loads; its descriptors get one row to stay well-formed.
    rows, lse = attend_query_block(
        q_base, k_base, v_base, o_base, tl.maximum(seq_kv, 1), seq_q, seq_kv, block_m * BLOCK_M,
        qk_scale, stride_qt, stride_kt, stride_vt, stride_ot, HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL,
        USE_TMA, DOT_F32,
    )  # fmt: skip
    lse_rows = q_start.to(tl.int64) + rows
    tl.store(lse_ptr + lse_rows * stride_lt + head * stride_lh, lse, mask=rows < seq_q)


def run(q, k, v, cu_seqlens_q, cu_seqlens_k, sm_scale, causal, o, lse):
    launch(q, k, v, cu_seqlens_q, cu_seqlens_k, sm_scale, causal, o, lse)


def launch(
    q, k, v, cu_seqlens_q, cu_seqlens_k, sm_scale, causal, o, lse, use_tma=None, config=None
):
    """``run`` with ``use_tma`` (None: wherever sm_90 and the strides allow) and ``config`` open."""
    total_q, q_heads, head_dim = q.shape
    kv_heads = k.shape[1]
    batch = cu_seqlens_q.shape[0] - 1
    check_heads("attention_prefill_varlen", head_dim, q_heads, kv_heads, q, k, v, o)
    if total_q == 0 or batch <= 0 or q_heads == 0:
        return
    config = config or launch_config(head_dim, total_q / batch, q.device)
    if use_tma is None:
        use_tma = tma_usable(q, k, v, o)
    if use_tma:
        allocate_descriptors(q.device)
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
        float(sm_scale) * LOG2E,
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
