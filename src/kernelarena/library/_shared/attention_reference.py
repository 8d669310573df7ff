"""The prefill references' attention over one sequence (attention_prefill, attention_prefill_varlen).

Each reference.py imports ``attend_heads`` from here; the library inlines this module into their
Definitions' reference text (``composed_reference`` in _spec.py), so each stays self-contained.
"""

import math

import torch

# Rows of queries per chunk are chosen so one chunk of scores stays under this many float32
# elements (512 MB): the reference fits on a GPU at batch 4, 32 heads, seq 4096 and beyond.
_SCORE_ELEMENTS = 1 << 27


def attend_heads(q, k, v, sm_scale, causal):
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
