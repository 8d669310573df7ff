"""torch SDPA's backends for the attention peers: grouped K/V heads passed as they are, and
expanded to the queries' heads, from then on, where a backend refuses them; the definition's
empty cases and its -inf lse for queries that see no key."""

import math

# (query heads, key heads) a backend refused to take grouped, by backend.
_REFUSED: dict[str, set[tuple[int, int]]] = {}


def with_grouped_heads(backend, q, k, v, *arguments):
    """``backend(q, k, v, *arguments)``, k and v repeated to q's heads where it refuses them."""
    heads = (q.shape[1], k.shape[1])
    refused = _REFUSED.setdefault(backend.__name__, set())
    if heads[0] != heads[1] and heads not in refused:
        try:
            return backend(q, k, v, *arguments)
        except RuntimeError:
            refused.add(heads)
    if heads[0] != heads[1]:
        k = k.repeat_interleave(heads[0] // heads[1], dim=1)
        v = v.repeat_interleave(heads[0] // heads[1], dim=1)
    return backend(q, k, v, *arguments)


def run_into(attention, q, k, v, sm_scale, causal, o, lse):
    """``attention(q, k, v, sm_scale, causal)``'s (o, lse) written into ``o`` and ``lse``, with
    the definition's empty cases: no query, nothing written; no key, o = 0 and lse = -inf."""
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
