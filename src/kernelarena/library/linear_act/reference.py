"""out = act(x @ weight^T + bias), computed in float32 and rounded once to the dtype of x."""

import math

import torch

# Each Definition's copy of this file names its own activation here (see linear_act/__init__.py).
ACTIVATION = "gelu_tanh"


def _activate(y):
    if ACTIVATION == "gelu_tanh":
        return 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y**3)))
    if ACTIVATION == "gelu":
        return 0.5 * y * (1.0 + torch.erf(y / math.sqrt(2.0)))
    if ACTIVATION == "silu":
        return y * torch.sigmoid(y)
    if ACTIVATION == "relu":
        return torch.clamp_min(y, 0.0)
    if ACTIVATION == "none":
        return y
    raise ValueError(f"unknown activation {ACTIVATION!r}")


def _matmul_float32(a, b_transposed):
    """a @ b_transposed^T in true float32: TF32 off for the duration on a GPU."""
    if not a.is_cuda:
        return a @ b_transposed.t()
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return a @ b_transposed.t()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def run(x, weight, bias):
    y = _matmul_float32(x.to(torch.float32), weight.to(torch.float32)) + bias.to(torch.float32)
    return _activate(y).to(x.dtype)


def make_inputs(axes, inputs, params, generator, device):
    """Weights scaled by 1/sqrt(k) so pre-activations are O(1) and every activation's curved
    region is exercised (plain N(0, 1) weights would give |y| ~ sqrt(k), deep in the linear part).

    params: ``input_scale`` multiplies x (extreme values: saturated activations);
    ``x_row_stride`` lays the rows of x out with that stride (strided rows).
    """
    k = axes["k"]
    weight = inputs["weight"]
    inputs["weight"] = (weight.to(torch.float32) / math.sqrt(max(k, 1))).to(weight.dtype)
    scale = params.get("input_scale")
    x = inputs["x"]
    if scale:
        x = (x.to(torch.float32) * scale).to(x.dtype)
    stride = params.get("x_row_stride")
    if stride:
        wide = torch.randn(axes["m"], stride, generator=generator, device=device).to(x.dtype)
        wide[:, :k] = x
        x = wide[:, :k]
    inputs["x"] = x
    return inputs
