"""Liger-Kernel peer for gelu_tanh_and_mul: LigerGELUMulFunction(a, b) = gelu_tanh(a) * b.

Liger's GEGLU has only the tanh approximation (no exact-GELU peer), rounds gelu(a) to the input
dtype before the product, and makes each half contiguous (its ``ensure_contiguous``), so the views
of x's halves passed here are copied first. benchmarks/bench_activations.py also times Liger on
separate contiguous halves, its own layout.
"""

import torch
from liger_kernel.ops.geglu import LigerGELUMulFunction


def run_tanh(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return LigerGELUMulFunction.apply(x[:, :d], x[:, d:])
