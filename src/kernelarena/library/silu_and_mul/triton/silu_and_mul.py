"""silu_and_mul in Triton: out[r, :] = silu(x[r, :d]) * x[r, d:], in float32, rounded once.

The gated activations' kernel (gated_activation.py in library/_shared/, with ACT = SILU): silu(g) =
g / (1 + 2^(-g log2 e)) with ex2.approx and div.full.f32, about 2e-6 relative error; the tile of
scale's kernel read twice, the gate half and the up half of each row, tuned on the device the first
time a (width, row-count bucket, dtype) is seen. Calls under TUNE_MIN_ELEMENTS outputs (128x4096
inputs are exactly at it) and the interpreter take the fixed plan.
"""

import torch
import triton

from ._shared.gated_activation import PLANS as _PLANS
from ._shared.gated_activation import SILU, launch, tuning_configs  # noqa: F401 (tests)

tuned_plans = _PLANS.tuners.plans


def run(x: torch.Tensor, out: torch.Tensor) -> None:
    launch(x, out, SILU, None)


def run_with_config(x: torch.Tensor, out: torch.Tensor, config: triton.Config) -> None:
    """One candidate plan, untuned (tests run every candidate)."""
    launch(x, out, SILU, config)
