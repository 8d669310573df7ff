"""attention_decode: one query token per sequence against a KV cache with per-sequence lengths.

q [batch, q_heads, head_dim], k_cache and v_cache [batch, kv_heads, max_seq, head_dim], seq_lens
int32 [batch] with 0 <= seq_lens <= max_seq; query head h reads KV head h // (q_heads //
kv_heads) over the first seq_lens[b] positions. lse is the natural-log log-sum-exp of the scaled
scores (float32); a sequence of length 0 has o = 0 and lse = -inf.

``bytes_moved`` and ``flops`` count the whole cache, upper bounds: a solution reads only the first
seq_lens[b] positions. It is exact for workloads whose sequences fill the cache (the default of
``make_inputs``, used by the performance workloads); the benchmark counts the K/V actually read.
"""

import math
from pathlib import Path

from kernelarena.data import Tolerance
from kernelarena.library._spec import (
    OperatorSpec,
    SolutionSpec,
    Variant,
    WorkloadSpec,
    scalar,
    tensor,
    var,
)

# As attention_prefill: P rounded to the input dtype before P @ V and o rounded once, so the same
# bounds (emulated errors within 1e-3 for fp16 and 4e-3 for bf16; a factor 2 to 2.5 of margin).
# Split-KV adds a float32 merge of normalised partials: relative error ~1e-6.
_LSE = Tolerance(atol=5e-4, rtol=5e-5)
_VARIANTS = (
    Variant("fp16", {"dtype": "float16"}, {"o": Tolerance(atol=2e-3, rtol=2e-3), "lse": _LSE}),
    Variant("bf16", {"dtype": "bfloat16"}, {"o": Tolerance(atol=1e-2, rtol=1e-2), "lse": _LSE}),
)


def _shape(batch, q_heads, kv_heads, max_seq, head_dim):
    return {
        "batch": batch,
        "q_heads": q_heads,
        "kv_heads": kv_heads,
        "max_seq": max_seq,
        "head_dim": head_dim,
    }


# (shape, tags, params)
_WORKLOADS = [
    (_shape(2, 4, 1, 40, 64), ("smoke", "correctness"), {"seq_lens": [40, 17]}),
    (_shape(3, 2, 2, 33, 128), ("smoke", "correctness"), {"seq_lens": [1, 0, 33]}),
    (_shape(4, 8, 2, 100, 64), ("correctness",), {"min_len": 0}),
    (_shape(2, 4, 4, 64, 128), ("correctness",), {"layout": "bshd", "seq_lens": [64, 5]}),
    (_shape(0, 8, 2, 64, 128), ("correctness",), {}),
    (_shape(16, 32, 8, 4096, 128), ("correctness", "large"), {"min_len": 0}),
    (_shape(3, 32, 4, 32768, 128), ("correctness", "large"), {"seq_lens": [32768, 1, 20000]}),
    (_shape(8, 16, 16, 2000, 64), ("correctness", "large"), {"layout": "bshd", "min_len": 1}),
    (_shape(64, 32, 8, 8192, 128), ("performance", "large"), {}),
    (_shape(64, 32, 8, 16384, 128), ("performance", "large"), {}),
    (_shape(64, 32, 8, 32768, 128), ("performance", "large"), {}),
    (_shape(64, 32, 8, 32768, 128), ("performance", "large"), {"min_len": 1}),
    # Small batches with long caches (issue 20): batch x KV heads alone fills few SMs, so these
    # measure the split count and the merge (bar: 75% of the copy bandwidth).
    *(
        (_shape(batch, 32, 8, cache, 128), ("performance", "large"), {})
        for batch in (1, 4, 8)
        for cache in (8192, 32768)
    ),
]

OPERATOR = OperatorSpec(
    name="attention_decode",
    op_type="attention",
    description="One query token per sequence against a KV cache with per-sequence lengths (GQA).",
    folder=Path(__file__).parent,
    axes={
        "batch": var("sequences (0 allowed)"),
        "q_heads": var("query heads"),
        "kv_heads": var("key/value heads; divides q_heads"),
        "max_seq": var("cache positions per sequence"),
        "head_dim": var("64 or 128"),
    },
    constraints=("kv_heads > 0 and q_heads % kv_heads == 0", "head_dim == 64 or head_dim == 128"),
    inputs={
        "q": tensor(["batch", "q_heads", "head_dim"], "{dtype}"),
        "k_cache": tensor(
            ["batch", "kv_heads", "max_seq", "head_dim"], "{dtype}", "any strides, last contiguous"
        ),
        "v_cache": tensor(
            ["batch", "kv_heads", "max_seq", "head_dim"], "{dtype}", "any strides, last contiguous"
        ),
        "seq_lens": tensor(
            ["batch"], "int32", "valid positions per sequence, 0 <= seq_lens <= max_seq"
        ),
        "sm_scale": scalar("float32", "multiplies q k^T before the softmax"),
    },
    outputs={
        "o": tensor(["batch", "q_heads", "head_dim"], "{dtype}"),
        "lse": tensor(
            ["batch", "q_heads"], "float32", "natural-log log-sum-exp of the scaled scores"
        ),
    },
    bytes_moved="nbytes('k_cache') + nbytes('v_cache') + nbytes('q') + nbytes('o') + nbytes('lse')",
    flops="4 * batch * q_heads * max_seq * head_dim",
    variants=_VARIANTS,
    workloads=tuple(
        WorkloadSpec(shape, {"sm_scale": 1.0 / math.sqrt(shape["head_dim"])}, tags, params)
        for shape, tags, params in _WORKLOADS
    ),
    solutions=(
        SolutionSpec(
            "triton",
            "triton",
            "triton/attention_decode.py::run",
            targets=("cuda", "cpu"),
            description="Split-KV (flash-decoding); grouped heads share K/V reads; splits merged.",
        ),
        SolutionSpec(
            "sdpa_efficient",
            "python",
            "torch/sdpa_efficient.py::run",
            description="torch SDPA memory-efficient backend, length mask (aten op with the lse).",
        ),
        SolutionSpec(
            "flashinfer",
            "python",
            "torch/flashinfer_decode.py::run",
            dependencies=("flashinfer-python",),
            description="FlashInfer batch decode, the cache read in place as pages, plan kept.",
        ),
    ),
)
