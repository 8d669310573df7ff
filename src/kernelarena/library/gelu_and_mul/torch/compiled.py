"""torch.compile peers: Inductor fuses the slices, the GELU and the product into one kernel.

``dynamic=False`` gives every shape its own specialized kernel; the compiled functions return a new
tensor (destination_passing_style=False), the way compiled code is called.
"""

import torch


@torch.compile(dynamic=False)
def _gelu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return torch.nn.functional.gelu(x[:, :d]) * x[:, d:]


@torch.compile(dynamic=False)
def _gelu_tanh_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return torch.nn.functional.gelu(x[:, :d], approximate="tanh") * x[:, d:]


def run(x: torch.Tensor) -> torch.Tensor:
    return _gelu_and_mul(x)


def run_tanh(x: torch.Tensor) -> torch.Tensor:
    return _gelu_tanh_and_mul(x)
