"""torch.compile peer: F.linear then the activation, compiled by Inductor in its default mode.

Inductor calls cuBLAS for the matmul and fuses the bias and the activation into one generated
kernel over the output. ``compile_per_shape`` gives every shape its own kernels, as a model
compiled for fixed shapes would have, and its own graph cache, so dynamo's limit of 8 graphs per
function never sends a shape to eager code; the compiled function returns a new tensor
(destination_passing_style=False), which is how compiled code is called.
"""

import torch.nn.functional as F

from kernelarena.library.per_shape import compile_per_shape


@compile_per_shape
def _gelu_tanh(x, weight, bias):
    return F.gelu(F.linear(x, weight, bias), approximate="tanh")


@compile_per_shape
def _gelu(x, weight, bias):
    return F.gelu(F.linear(x, weight, bias))


@compile_per_shape
def _silu(x, weight, bias):
    return F.silu(F.linear(x, weight, bias))


@compile_per_shape
def _relu(x, weight, bias):
    return F.relu(F.linear(x, weight, bias))


@compile_per_shape
def _none(x, weight, bias):
    return F.linear(x, weight, bias)


def run_gelu_tanh(x, weight, bias):
    return _gelu_tanh(x, weight, bias)


def run_gelu(x, weight, bias):
    return _gelu(x, weight, bias)


def run_silu(x, weight, bias):
    return _silu(x, weight, bias)


def run_relu(x, weight, bias):
    return _relu(x, weight, bias)


def run_none(x, weight, bias):
    return _none(x, weight, bias)
