"""attention_prefill_varlen: attention_prefill over sequences of different lengths packed along
one axis, located by offsets (cu_seqlens), as flash_attn_varlen_func and FlashInfer's ragged
prefill take them. Conventions as attention_prefill: GQA, causal mask bottom-right per sequence,
o = 0 and lse = -inf for a query that sees no key, lse natural-log in float32, here laid out
[total_q, q_heads]. Sequences of length 0 (queries or keys) are allowed.

``make_inputs`` draws the lengths from the workload (``q_lens`` / ``kv_lens``, or random cut
points of total_q and total_kv) and builds consistent offsets. No flops or bytes are declared:
both depend on the lengths, which are data.
"""

from pathlib import Path

from kernelarena.library import _attention_prefill_family as prefill
from kernelarena.library._spec import (
    OperatorSpec,
    SolutionSpec,
    WorkloadSpec,
    derived,
    scalar,
    tensor,
    var,
)

# Tolerances and scalars: attention_prefill's (library/_attention_prefill_family.py).


def _shape(sequences, total_q, total_kv, q_heads, kv_heads, head_dim):
    return {
        "len_indptr": sequences + 1,
        "total_q": total_q,
        "total_kv": total_kv,
        "q_heads": q_heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
    }


# (shape, causal, tags, params)
_WORKLOADS = [
    (
        _shape(3, 40, 40, 2, 1, 64),
        True,
        ("smoke", "correctness"),
        {"q_lens": [17, 0, 23], "kv_lens": [17, 0, 23]},
    ),
    (
        _shape(2, 18, 50, 2, 2, 128),
        False,
        ("smoke", "correctness"),
        {"q_lens": [1, 17], "kv_lens": [33, 17]},
    ),
    (
        _shape(4, 60, 90, 4, 2, 64),
        True,
        ("correctness",),
        {"q_lens": [20, 30, 0, 10], "kv_lens": [40, 0, 30, 20]},
    ),
    (_shape(3, 48, 48, 2, 1, 128), True, ("correctness",), {"layout": "packed_qkv"}),
    (_shape(2, 40, 40, 2, 2, 64), False, ("correctness",), {"q_scale": 8.0}),
    (_shape(0, 0, 0, 2, 1, 64), False, ("correctness",), {}),
    (_shape(8, 6000, 9000, 16, 4, 128), True, ("correctness", "large"), {}),
    (_shape(5, 3000, 3000, 8, 8, 64), False, ("correctness", "large"), {"layout": "packed_qkv"}),
    (_shape(8, 16384, 16384, 32, 8, 128), True, ("performance", "large"), {}),
    (_shape(16, 16384, 32768, 32, 8, 128), True, ("performance", "large"), {}),
]

OPERATOR = OperatorSpec(
    name="attention_prefill_varlen",
    op_type="attention",
    description="attention_prefill over packed variable-length sequences (cu_seqlens offsets).",
    folder=Path(__file__).parent,
    axes={
        "len_indptr": var("sequences + 1 (entries of each offsets tensor)"),
        "batch": derived("len_indptr - 1", "sequences"),
        "total_q": var("query tokens over all sequences"),
        "total_kv": var("key/value tokens over all sequences"),
        "q_heads": var("query heads"),
        "kv_heads": var("key/value heads; divides q_heads"),
        "head_dim": var("64 or 128"),
    },
    constraints=(
        "len_indptr >= 1",
        "kv_heads > 0 and q_heads % kv_heads == 0",
        "head_dim == 64 or head_dim == 128",
    ),
    inputs={
        "q": tensor(["total_q", "q_heads", "head_dim"], "{dtype}", "token rows may be strided"),
        "k": tensor(["total_kv", "kv_heads", "head_dim"], "{dtype}", "token rows may be strided"),
        "v": tensor(["total_kv", "kv_heads", "head_dim"], "{dtype}", "token rows may be strided"),
        "cu_seqlens_q": tensor(
            ["len_indptr"], "int32", "query offsets: 0, ..., total_q, non-decreasing"
        ),
        "cu_seqlens_k": tensor(["len_indptr"], "int32", "key/value offsets: 0, ..., total_kv"),
        "sm_scale": scalar("float32", "multiplies q k^T before the softmax"),
        "causal": scalar("bool", "mask aligned to the bottom-right corner of each sequence"),
    },
    outputs={
        "o": tensor(["total_q", "q_heads", "head_dim"], "{dtype}"),
        "lse": tensor(
            ["total_q", "q_heads"], "float32", "natural-log log-sum-exp of the scaled scores"
        ),
    },
    variants=prefill.VARIANTS,
    workloads=tuple(
        WorkloadSpec(shape, prefill.scalars(shape["head_dim"], causal), tags, params)
        for shape, causal, tags, params in _WORKLOADS
    ),
    solutions=(
        SolutionSpec(
            "triton",
            "triton",
            "triton/attention_prefill_varlen.py::run",
            shared=("attention_tile.py",),
            targets=("cuda", "cpu"),
            description="FlashAttention-2 loop per sequence; TMA bounded per sequence on sm_90.",
        ),
        SolutionSpec(
            "flash_varlen",
            "python",
            "torch/flash_varlen.py::run",
            description="torch's FlashAttention-2 varlen op (aten._flash_attention_forward).",
        ),
        SolutionSpec(
            "flashinfer",
            "python",
            "torch/flashinfer_varlen.py::run",
            dependencies=("flashinfer-python",),
            description="FlashInfer ragged batch prefill (FA3 on sm_90a, else FA2), plan kept.",
        ),
    ),
)
