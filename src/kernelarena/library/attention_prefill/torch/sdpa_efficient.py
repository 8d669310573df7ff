"""Peer: torch SDPA's memory-efficient (xFormers CUTLASS) backend, through
``aten._efficient_attention_forward`` with ``compute_log_sumexp`` (natural log; its lse rows are
padded to a multiple of 32). ``custom_mask_type`` 2 is the bottom-right causal mask the
definition uses (torch's ``causal_lower_right`` bias calls it so). The kernel needs as many K/V
heads as query heads, so grouped K/V are expanded first, as SDPA does for this backend.
"""

import math

import torch

_NO_MASK = 0
_CAUSAL_BOTTOM_RIGHT = 2


def attention(q, k, v, sm_scale, causal):
    """(o, lse) as fresh tensors, the way SDPA produces them (the benchmark times this)."""
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    out, lse = torch.ops.aten._efficient_attention_forward(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        bias=None,
        cu_seqlens_q=None,
        cu_seqlens_k=None,
        max_seqlen_q=None,
        max_seqlen_k=None,
        dropout_p=0.0,
        custom_mask_type=_CAUSAL_BOTTOM_RIGHT if causal else _NO_MASK,
        compute_log_sumexp=True,
        scale=float(sm_scale),
    )[:2]
    return out.transpose(1, 2), lse[:, :, : q.shape[2]]


def run(q, k, v, sm_scale, causal, o, lse):
    batch, q_heads, seq_q, _ = q.shape
    seq_kv = k.shape[2]
    if batch == 0 or q_heads == 0 or seq_q == 0:
        return
    if seq_kv == 0:
        o.zero_()
        lse.fill_(-math.inf)
        return
    if causal and seq_q > seq_kv:
        # With more queries than keys the backend's bottom-right mask gives wrong rows past the
        # first seq_q - seq_kv queries (torch 2.11): refused rather than answered wrong.
        raise NotImplementedError("causal attention with seq_q > seq_kv is wrong in this backend")
    out, logsumexp = attention(q, k, v, sm_scale, causal)
    o.copy_(out)
    lse.copy_(logsumexp)
