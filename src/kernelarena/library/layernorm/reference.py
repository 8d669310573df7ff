import torch


def run(x, weight, bias, eps):
    """out = (x - mean) / sqrt(var + eps) * weight + bias over each row, with the mean and the
    (biased) variance taken in float32 from x - mean (two passes: no cancellation when the mean is
    large against the spread); normalized, weighted and shifted in float32, rounded once."""
    xf = x.to(torch.float32)
    centered = xf - xf.mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(centered.square().mean(dim=-1, keepdim=True) + eps)
    return (centered * rstd * weight.to(torch.float32) + bias.to(torch.float32)).to(x.dtype)


def make_inputs(axes, inputs, params, generator, device):
    """Params: ``row_stride`` lays the rows of x out that many elements apart (wider than
    ``hidden``); ``x_scale`` multiplies x; ``x_offset`` is added to x (a mean large against the
    spread, where one-pass variance formulas cancel)."""
    x = inputs["x"]
    stride = params.get("row_stride")
    if stride:
        wide = torch.randn(axes["rows"], stride, generator=generator, device=device).to(x.dtype)
        x = wide[:, : axes["hidden"]]
    scale = params.get("x_scale", 1.0)
    offset = params.get("x_offset", 0.0)
    if scale != 1.0 or offset != 0.0:
        x.copy_(x.to(torch.float32) * scale + offset)
    inputs["x"] = x
    return inputs
