"""Peer: torch SDPA's cuDNN backend, through the op SDPA dispatches to
(``aten._scaled_dot_product_cudnn_attention`` with ``compute_log_sumexp``), which returns the
log-sum-exp (natural log) as [batch, heads, seq_q, 1].

cuDNN's causal mask, as torch sets it, is aligned top-left; it equals the definition's
bottom-right mask only when seq_q == seq_kv, so other causal shapes are refused. Grouped K/V heads
are passed as they are; should this torch refuse them, K/V are expanded and the refusal
remembered.
"""

import math

import torch

_EXPANDS_KV: dict[tuple[int, int], bool] = {}


def _cudnn(q, k, v, sm_scale, causal):
    out, lse = torch.ops.aten._scaled_dot_product_cudnn_attention(
        q, k, v, None, True, 0.0, bool(causal), False, scale=float(sm_scale)
    )[:2]
    return out, lse.reshape(q.shape[0], q.shape[1], q.shape[2])


def attention(q, k, v, sm_scale, causal):
    """(o, lse) as fresh tensors, the way SDPA produces them (the benchmark times this)."""
    if causal and q.shape[2] != k.shape[2]:
        raise NotImplementedError(
            "sdpa_cudnn: torch's cuDNN causal mask is top-left; needs seq_q == seq_kv"
        )
    heads = (q.shape[1], k.shape[1])
    if heads[0] != heads[1] and not _EXPANDS_KV.get(heads):
        try:
            return _cudnn(q, k, v, sm_scale, causal)
        except RuntimeError:
            _EXPANDS_KV[heads] = True
    if heads[0] != heads[1]:
        k = k.repeat_interleave(heads[0] // heads[1], dim=1)
        v = v.repeat_interleave(heads[0] // heads[1], dim=1)
    return _cudnn(q, k, v, sm_scale, causal)


def run(q, k, v, sm_scale, causal, o, lse):
    batch, q_heads, seq_q, _ = q.shape
    if batch == 0 or q_heads == 0 or seq_q == 0:
        return
    if k.shape[2] == 0:
        o.zero_()
        lse.fill_(-math.inf)
        return
    out, logsumexp = attention(q, k, v, sm_scale, causal)
    o.copy_(out)
    lse.copy_(logsumexp)
