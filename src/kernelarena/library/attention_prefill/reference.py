import torch

from kernelarena.library._shared.attention_reference import attend_heads


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
        o_b, lse_b = attend_heads(q[b].float(), keys, values, float(sm_scale), bool(causal))
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
