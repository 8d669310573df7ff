import math

import torch


def run(q, k_cache, v_cache, seq_lens, sm_scale):
    """One query token per sequence: o[b, h] = softmax(q[b, h] . k_cache[b, h // group, :len_b] *
    sm_scale) @ v_cache[b, h // group, :len_b] with group = q_heads // kv_heads and len_b =
    seq_lens[b]; lse natural-log, float32. A sequence of length 0 has o = 0 and lse = -inf."""
    batch, q_heads, head_dim = q.shape
    kv_heads = k_cache.shape[1]
    group = q_heads // kv_heads
    o = torch.zeros(batch, q_heads, v_cache.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((batch, q_heads), -math.inf, dtype=torch.float32, device=q.device)
    for b, length in enumerate(seq_lens.tolist()):
        if length <= 0:
            continue
        queries = q[b].float().reshape(kv_heads, group, head_dim)
        keys = k_cache[b, :, :length].float()
        values = v_cache[b, :, :length].float()
        scores = torch.matmul(queries, keys.transpose(1, 2)) * float(
            sm_scale
        )  # [kv_heads, group, len]
        lse_b = torch.logsumexp(scores, dim=-1)
        weights = torch.exp(scores - lse_b[..., None])
        o[b] = torch.matmul(weights, values).reshape(q_heads, -1).to(q.dtype)
        lse[b] = lse_b.reshape(q_heads)
    return o, lse


def make_inputs(axes, inputs, params, generator, device):
    """Params: ``seq_lens`` (a list, one per sequence) or ``min_len`` (lengths drawn uniformly in
    [min_len, max_seq]; without either every sequence fills the cache); ``layout="bshd"`` holds
    the caches token-major, [batch, max_seq, kv_heads, dim], and passes transposed views."""
    batch, max_seq = axes["batch"], axes["max_seq"]
    if params.get("seq_lens") is not None:
        lengths = torch.tensor(params["seq_lens"], dtype=torch.int32, device=device)
    elif params.get("min_len") is not None:
        lengths = torch.randint(
            params["min_len"], max_seq + 1, (batch,), generator=generator, device=device
        )
    else:
        lengths = torch.full((batch,), max_seq, device=device)
    inputs["seq_lens"] = lengths.to(torch.int32)
    if params.get("layout") == "bshd":
        for name in ("k_cache", "v_cache"):
            shape = (batch, max_seq, axes["kv_heads"], axes["head_dim"])
            drawn = torch.randn(shape, generator=generator, device=device)
            inputs[name] = drawn.to(inputs[name].dtype).transpose(1, 2)
    return inputs
