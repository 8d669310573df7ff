"""Liger-Kernel peer: LigerSiLUMulFunction(a, b) = silu(a) * b over two [rows, d] tensors.

Liger takes the halves as separate tensors and makes each contiguous (its ``ensure_contiguous``), so
the views of x's halves passed here are copied first: what a caller holding one [rows, 2 d] tensor
pays. benchmarks/bench_activations.py also times Liger on separate contiguous halves, its own
layout.
"""

import torch
from liger_kernel.ops.swiglu import LigerSiLUMulFunction


def run(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return LigerSiLUMulFunction.apply(x[:, :d], x[:, d:])
