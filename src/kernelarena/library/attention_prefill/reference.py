import math

import torch

# Rows of queries per chunk are chosen so one chunk of scores stays under this many float32
# elements (512 MB): the reference fits on a GPU at batch 4, 32 heads, seq 4096 and beyond.
_SCORE_ELEMENTS = 1 << 27


def _attend_one(q, k, v, sm_scale, causal):
    """q [heads, seq_q, dim], k and v [heads, seq_kv, dim], all float32 with equal heads.

    Causal masking is aligned to the bottom-right corner: query i sees keys j <= i + seq_kv - seq_q.
    A query that sees no key gets o = 0 and lse = -inf.
    """
    heads, seq_q, _ = q.shape
    seq_kv = k.shape[1]
    o = torch.zeros(heads, seq_q, v.shape[-1], dtype=torch.float32, device=q.device)
    lse = torch.full((heads, seq_q), -math.inf, dtype=torch.float32, device=q.device)
    if seq_q == 0 or seq_kv == 0:
        return o, lse
    rows = max(1, _SCORE_ELEMENTS // (heads * seq_kv))
    keys = torch.arange(seq_kv, device=q.device)
    for start in range(0, seq_q, rows):
        stop = min(seq_q, start + rows)
        scores = torch.matmul(q[:, start:stop], k.transpose(1, 2)) * sm_scale
        if causal:
            queries = torch.arange(start, stop, device=q.device)
            hidden = keys[None, :] > queries[:, None] + (seq_kv - seq_q)
            scores = scores.masked_fill(hidden, -math.inf)
        chunk_lse = torch.logsumexp(scores, dim=-1)
        seen = torch.isfinite(chunk_lse)
        weights = torch.exp(scores - torch.where(seen, chunk_lse, 0.0)[..., None])
        weights = torch.where(seen[..., None], weights, 0.0)
        o[:, start:stop] = torch.matmul(weights, v)
        lse[:, start:stop] = chunk_lse
    return o, lse


def run(q, k, v, sm_scale, causal):
    """o = softmax(q k^T * sm_scale) v per (batch, query head); lse = natural-log log-sum-exp of
    the scaled scores (float32). Query head h reads key/value head h // (q_heads // kv_heads)."""
    batch, q_heads, seq_q, _ = q.shape
    kv_heads = k.shape[1]
    group = q_heads // kv_heads
    o = torch.empty((*q.shape[:3], v.shape[-1]), dtype=q.dtype, device=q.device)
    lse = torch.empty(batch, q_heads, seq_q, dtype=torch.float32, device=q.device)
    for b in range(batch):
        keys = k[b].float().repeat_interleave(group, dim=0)
        values = v[b].float().repeat_interleave(group, dim=0)
        o_b, lse_b = _attend_one(q[b].float(), keys, values, float(sm_scale), bool(causal))
        o[b] = o_b.to(q.dtype)
        lse[b] = lse_b
    return o, lse


def make_inputs(axes, inputs, params, generator, device):
    """Params: ``layout="bshd"`` draws q, k, v as [batch, seq, heads, dim] and passes transposed
    views (strided, as most models hold them); ``q_scale`` multiplies q to sharpen the softmax
    (large logits test the running maximum)."""
    if params.get("layout") == "bshd":
        for name, heads, seq in (
            ("q", axes["q_heads"], axes["seq_q"]),
            ("k", axes["kv_heads"], axes["seq_kv"]),
            ("v", axes["kv_heads"], axes["seq_kv"]),
        ):
            shape = (axes["batch"], seq, heads, axes["head_dim"])
            drawn = torch.randn(shape, generator=generator, device=device)
            inputs[name] = drawn.to(inputs[name].dtype).transpose(1, 2)
    q_scale = params.get("q_scale")
    if q_scale:
        inputs["q"] = inputs["q"].mul_(q_scale)  # in place: keeps the layout drawn above
    return inputs
