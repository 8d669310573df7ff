"""out = silu(x @ w_gate^T) * (x @ w_up^T), computed in float32 and rounded once to the dtype of x."""

import math

import torch


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


def run(x, w_gate, w_up):
    x32 = x.to(torch.float32)
    gate = _matmul_float32(x32, w_gate.to(torch.float32))
    up = _matmul_float32(x32, w_up.to(torch.float32))
    return (gate * torch.sigmoid(gate) * up).to(x.dtype)


def make_inputs(axes, inputs, params, generator, device):
    """Weights scaled by 1/sqrt(k) so gate and up are O(1) and silu's curved region is exercised.

    params: ``input_scale`` multiplies x (extreme values); ``x_row_stride`` lays the rows of x out
    with that stride (strided rows).
    """
    k = axes["k"]
    for name in ("w_gate", "w_up"):
        weight = inputs[name]
        inputs[name] = (weight.to(torch.float32) / math.sqrt(max(k, 1))).to(weight.dtype)
    x = inputs["x"]
    scale = params.get("input_scale")
    if scale:
        x = (x.to(torch.float32) * scale).to(x.dtype)
    stride = params.get("x_row_stride")
    if stride:
        wide = torch.randn(axes["m"], stride, generator=generator, device=device).to(x.dtype)
        wide[:, :k] = x
        x = wide[:, :k]
    inputs["x"] = x
    return inputs
