"""Peer: torch's FlashAttention-2 variable-length op (``aten._flash_attention_forward`` with
cumulative offsets), the kernel behind ``flash_attn_varlen_func``. It returns the log-sum-exp
(natural log) as [q_heads, total_q]; with ``is_causal`` the mask is bottom-right per sequence.

The op needs the longest query and key sequence on the host, so each call reads the offsets
back (one device-to-host sync, as a serving engine that keeps its lengths on the CPU would not
need). FlashAttention-2 leaves rows that see no key as lse = +inf (and sequences without keys
undefined); those rows are set to the definition's o = 0, lse = -inf from the offsets, on the
device, without a sync.
"""

import math

import torch


def _longest(offsets):
    return int((offsets[1:] - offsets[:-1]).max()) if offsets.numel() > 1 else 0


def attention(q, k, v, cu_seqlens_q, cu_seqlens_k, sm_scale, causal, max_q=None, max_k=None):
    """(o, lse [q_heads, total_q]) as fresh tensors, the way the op produces them (the benchmark
    times this with the lengths known in advance)."""
    max_q = _longest(cu_seqlens_q) if max_q is None else max_q
    max_k = _longest(cu_seqlens_k) if max_k is None else max_k
    out, lse = torch.ops.aten._flash_attention_forward(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_q,
        max_k,
        0.0,
        bool(causal),
        False,
        scale=float(sm_scale),
    )[:2]
    return out, lse


def _sees_no_key(cu_seqlens_q, cu_seqlens_k, total_q, causal):
    """Per query token: True where it sees no key (its sequence has no keys, or the causal
    diagonal passes it)."""
    q_lens = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).long()
    k_lens = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).long()
    sequence = torch.repeat_interleave(
        torch.arange(q_lens.numel(), device=q_lens.device), q_lens, output_size=total_q
    )
    k_len = k_lens[sequence]
    empty = k_len == 0
    if causal:
        position = torch.arange(total_q, device=q_lens.device) - cu_seqlens_q[sequence].long()
        empty |= position + k_len - q_lens[sequence] < 0
    return empty


def run(q, k, v, cu_seqlens_q, cu_seqlens_k, sm_scale, causal, o, lse):
    total_q = q.shape[0]
    if total_q == 0 or q.shape[1] == 0:
        return
    if k.shape[0] == 0:
        o.zero_()
        lse.fill_(-math.inf)
        return
    out, logsumexp = attention(q, k, v, cu_seqlens_q, cu_seqlens_k, sm_scale, causal)
    empty = _sees_no_key(cu_seqlens_q, cu_seqlens_k, total_q, bool(causal))
    o.copy_(torch.where(empty[:, None, None], 0.0, out))
    lse.copy_(torch.where(empty[:, None], -math.inf, logsumexp.transpose(0, 1)))
