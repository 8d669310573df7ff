"""Peer: torch SDPA's FlashAttention-2 backend, through the op SDPA itself dispatches to
(``aten._scaled_dot_product_flash_attention``), which also returns the log-sum-exp (natural log).

With ``is_causal`` this op aligns the mask bottom-right (torch's ``causal_lower_right`` bias calls
it for exactly that), as the definition does. FlashAttention-2 reads grouped K/V heads natively;
should this torch refuse them, K/V are expanded once per call and the refusal remembered.
FlashAttention-2 reports lse = +inf for rows that see no key; the definition says -inf.
"""

import math

import torch

_EXPANDS_KV: dict[tuple[int, int], bool] = {}


def _flash(q, k, v, sm_scale, causal):
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention(
        q, k, v, 0.0, bool(causal), False, scale=float(sm_scale)
    )[:2]
    return out, lse


def attention(q, k, v, sm_scale, causal):
    """(o, lse) as fresh tensors, the way SDPA produces them (the benchmark times this)."""
    heads = (q.shape[1], k.shape[1])
    if heads[0] != heads[1] and not _EXPANDS_KV.get(heads):
        try:
            return _flash(q, k, v, sm_scale, causal)
        except RuntimeError:
            _EXPANDS_KV[heads] = True
    if heads[0] != heads[1]:
        k = k.repeat_interleave(heads[0] // heads[1], dim=1)
        v = v.repeat_interleave(heads[0] // heads[1], dim=1)
    return _flash(q, k, v, sm_scale, causal)


def run(q, k, v, sm_scale, causal, o, lse):
    batch, q_heads, seq_q, _ = q.shape
    seq_kv = k.shape[2]
    if batch == 0 or q_heads == 0 or seq_q == 0:
        return
    if seq_kv == 0:
        o.zero_()
        lse.fill_(-math.inf)
        return
    out, logsumexp = attention(q, k, v, sm_scale, causal)
    o.copy_(out)
    lse.copy_(logsumexp)
    if causal and seq_q > seq_kv:  # the first seq_q - seq_kv queries see no key
        o[:, :, : seq_q - seq_kv].zero_()
        lse[:, :, : seq_q - seq_kv].fill_(-math.inf)
