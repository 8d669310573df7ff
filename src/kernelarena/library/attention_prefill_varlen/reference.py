import math

import torch

from kernelarena.library._shared.attention_reference import attend_heads


def run(q, k, v, cu_seqlens_q, cu_seqlens_k, sm_scale, causal):
    """Sequence i: queries q[cu_seqlens_q[i]:cu_seqlens_q[i+1]] attend to keys and values
    k, v[cu_seqlens_k[i]:cu_seqlens_k[i+1]]; query head h reads key/value head
    h // (q_heads // kv_heads). lse [total_q, q_heads] is natural-log, float32."""
    total_q, q_heads, _ = q.shape
    group = q_heads // k.shape[1]
    o = torch.zeros(total_q, q_heads, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((total_q, q_heads), -math.inf, dtype=torch.float32, device=q.device)
    q_offsets = cu_seqlens_q.tolist()
    k_offsets = cu_seqlens_k.tolist()
    for i in range(len(q_offsets) - 1):
        q0, q1, k0, k1 = q_offsets[i], q_offsets[i + 1], k_offsets[i], k_offsets[i + 1]
        if q1 == q0:
            continue
        queries = q[q0:q1].float().transpose(0, 1)
        keys = k[k0:k1].float().transpose(0, 1).repeat_interleave(group, dim=0)
        values = v[k0:k1].float().transpose(0, 1).repeat_interleave(group, dim=0)
        o_i, lse_i = attend_heads(queries, keys, values, float(sm_scale), bool(causal))
        o[q0:q1] = o_i.transpose(0, 1).to(q.dtype)
        lse[q0:q1] = lse_i.transpose(0, 1)
    return o, lse


def _offsets(total, count, lengths, generator, device):
    """[0, ..., total] with ``count`` gaps: the given lengths, else cut points drawn uniformly
    (so lengths vary widely and zero-length sequences occur)."""
    if lengths is not None:
        if len(lengths) != count or sum(lengths) != total:
            raise ValueError(f"lengths {lengths} must be {count} numbers summing to {total}")
        sizes = torch.tensor(lengths, dtype=torch.int64, device=device)
    else:
        cuts = torch.randint(0, total + 1, (max(count - 1, 0),), generator=generator, device=device)
        edges = torch.cat(
            [
                torch.zeros(1, dtype=torch.int64, device=device),
                cuts.sort().values,
                torch.full((1,), total, dtype=torch.int64, device=device),
            ]
        )
        sizes = edges.diff() if count > 0 else edges[:0]
    return torch.cat([torch.zeros(1, dtype=torch.int64, device=device), sizes.cumsum(0)]).to(
        torch.int32
    )


def make_inputs(axes, inputs, params, generator, device):
    """Params: ``q_lens`` / ``kv_lens`` (lists summing to total_q / total_kv; else drawn at random),
    ``layout="packed_qkv"`` (q, k, v as slices of one [tokens, q_heads + 2 kv_heads, dim] tensor,
    needs total_q == total_kv), ``q_scale`` (sharpens the softmax)."""
    count = axes["len_indptr"] - 1
    inputs["cu_seqlens_q"] = _offsets(
        axes["total_q"], count, params.get("q_lens"), generator, device
    )
    inputs["cu_seqlens_k"] = _offsets(
        axes["total_kv"], count, params.get("kv_lens"), generator, device
    )
    if params.get("layout") == "packed_qkv":
        q_heads, kv_heads = axes["q_heads"], axes["kv_heads"]
        packed = torch.randn(
            axes["total_q"],
            q_heads + 2 * kv_heads,
            axes["head_dim"],
            generator=generator,
            device=device,
        ).to(inputs["q"].dtype)
        inputs["q"] = packed[:, :q_heads]
        inputs["k"] = packed[:, q_heads : q_heads + kv_heads]
        inputs["v"] = packed[:, q_heads + kv_heads :]
    q_scale = params.get("q_scale")
    if q_scale:
        inputs["q"] = inputs["q"].mul_(q_scale)  # in place: keeps the layout drawn above
    return inputs
