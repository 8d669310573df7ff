"""attention_prefill: o = softmax(q k^T * sm_scale [+ causal mask]) v and its log-sum-exp, with
grouped-query attention (GQA), for head_dim 64 and 128 in float16 and bfloat16.

Conventions, shared by the reference and every solution:
- Query head h reads key/value head h // (q_heads // kv_heads).
- ``causal`` aligns the mask to the bottom-right corner, as FlashAttention does: query i sees keys
  j <= i + seq_kv - seq_q. With seq_q > seq_kv the first seq_q - seq_kv queries see no key.
- A query that sees no key (seq_kv = 0, or masked out) has o = 0 and lse = -inf.
- lse is the natural logarithm of sum_j exp(score_ij), scores already multiplied by sm_scale.

``flops`` counts 4 * batch * q_heads * seq_q * seq_kv * head_dim (two matrix products), halved when
the ``causal`` scalar is set, the convention FlashAttention's and the benchmark's figures use.
"""

from pathlib import Path

from kernelarena.library import _attention_prefill_family as prefill
from kernelarena.library._spec import (
    OperatorSpec,
    SolutionSpec,
    WorkloadSpec,
    scalar,
    tensor,
    var,
)


def _shape(batch, q_heads, kv_heads, seq_q, seq_kv, head_dim):
    return {
        "batch": batch,
        "q_heads": q_heads,
        "kv_heads": kv_heads,
        "seq_q": seq_q,
        "seq_kv": seq_kv,
        "head_dim": head_dim,
    }


# (shape, causal, tags, params): smoke ones run on CPU in about a second each under the interpreter.
_WORKLOADS = [
    (_shape(1, 2, 1, 17, 17, 64), True, ("smoke", "correctness"), {}),
    (_shape(1, 1, 1, 1, 17, 128), False, ("smoke", "correctness"), {}),
    (_shape(1, 2, 2, 17, 17, 128), False, ("correctness",), {}),
    (_shape(2, 2, 1, 1, 1, 64), True, ("correctness",), {}),
    (_shape(1, 2, 1, 17, 40, 64), True, ("correctness",), {}),  # seq_q < seq_kv
    (_shape(1, 2, 1, 40, 17, 64), True, ("correctness",), {}),  # seq_q > seq_kv: rows see nothing
    (_shape(2, 4, 2, 33, 33, 128), False, ("correctness",), {"layout": "bshd"}),
    (_shape(1, 2, 2, 48, 48, 64), True, ("correctness",), {"q_scale": 8.0}),
    (_shape(0, 2, 1, 16, 16, 64), False, ("correctness",), {}),
    (_shape(1, 2, 1, 16, 0, 64), False, ("correctness",), {}),
    (_shape(2, 8, 2, 1000, 1000, 128), True, ("correctness", "large"), {}),
    (_shape(2, 8, 8, 1000, 1000, 64), False, ("correctness", "large"), {"layout": "bshd"}),
    (_shape(1, 4, 2, 1000, 1000, 64), True, ("correctness", "large"), {}),
    (_shape(1, 8, 1, 1000, 3000, 128), True, ("correctness", "large"), {}),
    (_shape(1, 32, 8, 4096, 4096, 128), True, ("correctness", "large"), {"q_scale": 4.0}),
    (_shape(4, 32, 32, 4096, 4096, 128), False, ("performance", "large"), {}),
    (_shape(4, 32, 32, 4096, 4096, 128), True, ("performance", "large"), {}),
    (_shape(4, 32, 8, 4096, 4096, 128), True, ("performance", "large"), {}),
    (_shape(4, 32, 32, 4096, 4096, 64), False, ("performance", "large"), {}),
]

OPERATOR = OperatorSpec(
    name="attention_prefill",
    op_type="attention",
    description="o = softmax(q k^T * sm_scale, causal bottom-right) v and natural-log lse; GQA.",
    folder=Path(__file__).parent,
    axes={
        "batch": var("sequences (0 allowed)"),
        "q_heads": var("query heads"),
        "kv_heads": var("key/value heads; divides q_heads"),
        "seq_q": var("queries per sequence"),
        "seq_kv": var("keys per sequence"),
        "head_dim": var("64 or 128"),
    },
    constraints=("kv_heads > 0 and q_heads % kv_heads == 0", "head_dim == 64 or head_dim == 128"),
    inputs={
        "q": tensor(
            ["batch", "q_heads", "seq_q", "head_dim"], "{dtype}", "any strides, last contiguous"
        ),
        "k": tensor(
            ["batch", "kv_heads", "seq_kv", "head_dim"], "{dtype}", "any strides, last contiguous"
        ),
        "v": tensor(
            ["batch", "kv_heads", "seq_kv", "head_dim"], "{dtype}", "any strides, last contiguous"
        ),
        "sm_scale": scalar("float32", "multiplies q k^T before the softmax"),
        "causal": scalar("bool", "mask aligned to the bottom-right corner"),
    },
    outputs={
        "o": tensor(["batch", "q_heads", "seq_q", "head_dim"], "{dtype}"),
        "lse": tensor(
            ["batch", "q_heads", "seq_q"], "float32", "natural-log log-sum-exp of the scaled scores"
        ),
    },
    flops="4 * batch * q_heads * seq_q * seq_kv * head_dim / (2 if causal else 1)",
    variants=prefill.VARIANTS,
    workloads=tuple(
        WorkloadSpec(shape, prefill.scalars(shape["head_dim"], causal), tags, params)
        for shape, causal, tags, params in _WORKLOADS
    ),
    solutions=(
        SolutionSpec(
            "triton",
            "triton",
            "triton/attention_prefill.py::run",
            shared=("attention_tile.py",),
            targets=("cuda", "cpu"),
            description="FlashAttention-2 loop; TMA descriptors and pipelined loads on sm_90.",
        ),
        SolutionSpec(
            "cuda",
            "cuda",
            "cuda/attention_prefill.cu::run",
            extra_files=(
                "cuda/attention_prefill_ptx.cuh",
                "cuda/attention_prefill_sm90.cuh",
                "cuda/attention_prefill_simple.cuh",
            ),
            shared=("mbarrier.cuh",),
            targets=("sm_90a",),
            description="FlashAttention-3 structure in PTX: TMA, mbarriers, wgmma, a producer "
            "and two ping-ponged consumer warpgroups; a portable path for strides TMA cannot take.",
        ),
        SolutionSpec(
            "sdpa_flash",
            "python",
            "torch/sdpa_flash.py::run",
            shared=("sdpa_heads.py",),
            description="torch SDPA, FlashAttention-2 backend (aten op with the lse).",
        ),
        SolutionSpec(
            "sdpa_cudnn",
            "python",
            "torch/sdpa_cudnn.py::run",
            shared=("sdpa_heads.py",),
            description="torch SDPA, cuDNN backend (aten op with the lse).",
        ),
        SolutionSpec(
            "sdpa_efficient",
            "python",
            "torch/sdpa_efficient.py::run",
            description="torch SDPA, memory-efficient (xFormers) backend (aten op with the lse).",
        ),
        SolutionSpec(
            "flashinfer",
            "python",
            "torch/flashinfer_prefill.py::run",
            dependencies=("flashinfer-python",),
            description="FlashInfer prefill (FA3 on sm_90a, else FA2), one launch per sequence.",
        ),
    ),
)
