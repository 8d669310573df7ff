"""Peer: torch SDPA's cuDNN backend, through the op SDPA dispatches to
(``aten._scaled_dot_product_cudnn_attention`` with ``compute_log_sumexp``), which returns the
log-sum-exp (natural log) as [batch, heads, seq_q, 1].

cuDNN's causal mask, as torch sets it, is aligned top-left; it equals the definition's
bottom-right mask only when seq_q == seq_kv, so other causal shapes are refused. Grouped K/V heads
are passed as they are; should this torch refuse them, K/V are expanded and the refusal
remembered.
"""

import torch

from ._shared.sdpa_heads import run_into, with_grouped_heads


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
    return with_grouped_heads(_cudnn, q, k, v, sm_scale, causal)


def run(q, k, v, sm_scale, causal, o, lse):
    run_into(attention, q, k, v, sm_scale, causal, o, lse)
