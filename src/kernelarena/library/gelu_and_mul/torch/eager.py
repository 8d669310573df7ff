import torch


def run(x, out):
    # Two kernels: GELU of the gate half into a temporary, then the product into out.
    d = x.shape[-1] // 2
    torch.mul(torch.nn.functional.gelu(x[:, :d]), x[:, d:], out=out)


def run_tanh(x, out):
    d = x.shape[-1] // 2
    torch.mul(torch.nn.functional.gelu(x[:, :d], approximate="tanh"), x[:, d:], out=out)
