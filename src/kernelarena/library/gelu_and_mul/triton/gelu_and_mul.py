"""gelu_and_mul and gelu_tanh_and_mul in Triton: out[r, :] = gelu(x[r, :d]) * x[r, d:].

The gated activations' kernel (gated_activation.py in library/_shared/, which says how each GELU is
computed), with FlashInfer's names: ``run`` is exact (ACT = GELU: g Phi(g), Phi from a branch-free
erfc, one ex2, one division and ten FMAs an element), ``run_tanh`` the approximation (ACT =
GELU_TANH: g / (1 + 2^(-2 z log2 e)), one ex2 and one division like SiLU). The tile is scale's,
tuned on the device; calls under TUNE_MIN_ELEMENTS outputs and the interpreter take the fixed plan.
"""

import torch
import triton

from ._shared.gated_activation import GELU, GELU_TANH, launch, tuning_configs  # noqa: F401 (tests)
from ._shared.gated_activation import PLANS as _PLANS

tuned_plans = _PLANS.tuners.plans


def run(x: torch.Tensor, out: torch.Tensor) -> None:
    """gelu_and_mul: exact GELU."""
    launch(x, out, GELU, None)


def run_tanh(x: torch.Tensor, out: torch.Tensor) -> None:
    """gelu_tanh_and_mul: GELU in its tanh approximation."""
    launch(x, out, GELU_TANH, None)


def run_with_config(x: torch.Tensor, out: torch.Tensor, tanh: bool, config: triton.Config) -> None:
    """One candidate plan, untuned (tests run every candidate)."""
    launch(x, out, GELU_TANH if tanh else GELU, config)
