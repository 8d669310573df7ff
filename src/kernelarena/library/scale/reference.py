import torch


def run(x, factor):
    return (x.to(torch.float32) * factor).to(x.dtype)


def make_inputs(axes, inputs, params, generator, device):
    """``row_stride`` (params): lay rows out with a stride wider than ``cols``."""
    stride = params.get("row_stride")
    if stride:
        x = inputs["x"]
        wide = torch.randn(axes["rows"], stride, generator=generator, device=device).to(x.dtype)
        inputs["x"] = wide[:, : axes["cols"]]
    return inputs
