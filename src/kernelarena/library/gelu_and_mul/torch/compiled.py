"""torch.compile peers: Inductor fuses the slices, the GELU and the product into one kernel.

``compile_per_shape``: static shapes, so every shape gets its own specialized kernel, and a graph cache
per shape and dtype, so dynamo's limit of 8 graphs per function never sends a shape to eager code.
The compiled functions return a new tensor (destination_passing_style=False), the way compiled code is called.
"""

import torch

from kernelarena.library.per_shape import compile_per_shape


@compile_per_shape
def _gelu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return torch.nn.functional.gelu(x[:, :d]) * x[:, d:]


@compile_per_shape
def _gelu_tanh_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return torch.nn.functional.gelu(x[:, :d], approximate="tanh") * x[:, d:]


def run(x: torch.Tensor) -> torch.Tensor:
    return _gelu_and_mul(x)


def run_tanh(x: torch.Tensor) -> torch.Tensor:
    return _gelu_tanh_and_mul(x)
