import torch


def run(x, out):
    # Two kernels: silu of the gate half into a temporary, then the product into out.
    d = x.shape[-1] // 2
    torch.mul(torch.nn.functional.silu(x[:, :d]), x[:, d:], out=out)
