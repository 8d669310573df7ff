"""What the prefill attentions (attention_prefill, attention_prefill_varlen) declare alike: the
dtype variants with their tolerances, and the workloads' scalars (the same arithmetic per
sequence, whether sequences are batched or packed)."""

from __future__ import annotations

import math

from kernelarena.data import Tolerance
from kernelarena.library._spec import Variant

# Tolerances. Solutions accumulate scores and the output in float32 but round the softmax weights
# P to the input dtype before P @ V (as every FlashAttention does, to use 16-bit tensor cores),
# and round o once. The error per element is about u * (|o| + sum_j p_j |v_j|) with the unit
# roundoff u (fp16 2^-11, bf16 2^-8). An emulation of that rounding at seq 2048 with standard
# normal inputs, and with q scaled by 8 (sharp softmax, |o| up to 4.7), stays within
# atol = rtol = 1e-3 (fp16) and 4e-3 (bf16); the bounds below leave a factor 2 to 2.5 for the
# order of accumulation. lse is float32 throughout: |score| <= ~40 with 1e-6 relative error.
_LSE = Tolerance(atol=5e-4, rtol=5e-5)
VARIANTS = (
    Variant("fp16", {"dtype": "float16"}, {"o": Tolerance(atol=2e-3, rtol=2e-3), "lse": _LSE}),
    Variant("bf16", {"dtype": "bfloat16"}, {"o": Tolerance(atol=1e-2, rtol=1e-2), "lse": _LSE}),
)


def scalars(head_dim: int, causal: bool) -> dict[str, float | bool]:
    """A workload's scalars: the usual sm_scale = 1 / sqrt(head_dim), and ``causal``."""
    return {"sm_scale": 1.0 / math.sqrt(head_dim), "causal": causal}
