"""Peer: torch SDPA's memory-efficient (xFormers CUTLASS) backend for decode, through
``aten._efficient_attention_forward`` with ``compute_log_sumexp`` (natural log) and an additive
mask of -inf past each sequence's length.

The kernel wants as many K/V heads as query heads; rather than copying the cache per query head,
the query heads of a group become the group's query rows ([batch, group, kv_heads, dim] against
[batch, max_seq, kv_heads, dim]), so every cache byte is read once per KV head, as in the Triton
solution. The mask is built from seq_lens on the device each call (no host sync); the kernel
still streams the whole cache. Its lse rows are padded to a multiple of 32.
"""

import math

import torch


def attention(q, k_cache, v_cache, seq_lens, sm_scale):
    """(o, lse) as fresh tensors, the way the op produces them (the benchmark times this)."""
    batch, q_heads, head_dim = q.shape
    kv_heads, max_seq = k_cache.shape[1], k_cache.shape[2]
    group = q_heads // kv_heads
    query = q.reshape(batch, kv_heads, group, head_dim).transpose(1, 2)
    # The kernel wants 16-element aligned bias rows: pad the row, then view the first max_seq.
    padded = (max_seq + 15) // 16 * 16
    positions = torch.arange(padded, device=q.device)
    bias = torch.zeros(batch, padded, dtype=q.dtype, device=q.device)
    bias.masked_fill_(positions[None, :] >= seq_lens[:, None], -math.inf)
    bias = bias[:, None, None, :max_seq].expand(batch, kv_heads, group, max_seq)
    out, lse = torch.ops.aten._efficient_attention_forward(
        query,
        k_cache.transpose(1, 2),
        v_cache.transpose(1, 2),
        bias=bias,
        cu_seqlens_q=None,
        cu_seqlens_k=None,
        max_seqlen_q=None,
        max_seqlen_k=None,
        dropout_p=0.0,
        custom_mask_type=0,
        compute_log_sumexp=True,
        scale=float(sm_scale),
    )[:2]
    o = out.transpose(1, 2).reshape(batch, q_heads, head_dim)
    return o, lse[:, :, :group].reshape(batch, q_heads)


def run(q, k_cache, v_cache, seq_lens, sm_scale, o, lse):
    if q.shape[0] == 0 or q.shape[1] == 0:
        return
    if k_cache.shape[2] == 0:
        o.zero_()
        lse.fill_(-math.inf)
        return
    out, logsumexp = attention(q, k_cache, v_cache, seq_lens, sm_scale)
    empty = (seq_lens <= 0)[:, None]  # every key masked: the kernel's rows are not defined there
    o.copy_(torch.where(empty[:, :, None], 0.0, out))
    lse.copy_(torch.where(empty, -math.inf, logsumexp))
