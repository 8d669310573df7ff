"""Peer: torch SDPA's FlashAttention-2 backend, through the op SDPA itself dispatches to
(``aten._scaled_dot_product_flash_attention``), which also returns the log-sum-exp (natural log).

With ``is_causal`` this op aligns the mask bottom-right (torch's ``causal_lower_right`` bias calls
it for exactly that), as the definition does. FlashAttention-2 reads grouped K/V heads natively;
should this torch refuse them, K/V are expanded once per call and the refusal remembered.
FlashAttention-2 reports lse = +inf for rows that see no key; the definition says -inf.
"""

import math

import torch

from ._shared.sdpa_heads import run_into, with_grouped_heads


def _flash(q, k, v, sm_scale, causal):
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention(
        q, k, v, 0.0, bool(causal), False, scale=float(sm_scale)
    )[:2]
    return out, lse


def attention(q, k, v, sm_scale, causal):
    """(o, lse) as fresh tensors, the way SDPA produces them (the benchmark times this)."""
    return with_grouped_heads(_flash, q, k, v, sm_scale, causal)


def run(q, k, v, sm_scale, causal, o, lse):
    run_into(attention, q, k, v, sm_scale, causal, o, lse)
    seq_q, seq_kv = q.shape[2], k.shape[2]
    if causal and seq_kv and seq_q > seq_kv:  # the first seq_q - seq_kv queries see no key
        o[:, :, : seq_q - seq_kv].zero_()
        lse[:, :, : seq_q - seq_kv].fill_(-math.inf)
