import torch


def run(x, residual, weight, eps):
    """residual_out = x + residual, added in float32 and rounded once to the storage dtype;
    out = rmsnorm(residual_out): the rounded sum, as stored, is what gets normalized (in float32,
    weighted, rounded once), so out equals rmsnorm of residual_out exactly as eager PyTorch, vLLM's
    native path and Liger compute it. (FlashInfer normalizes the unrounded float32 sum; the two
    differ by at most one rounding of the storage dtype, within tolerance.)"""
    residual_out = (x.to(torch.float32) + residual.to(torch.float32)).to(x.dtype)
    s = residual_out.to(torch.float32)
    rstd = torch.rsqrt(s.square().mean(dim=-1, keepdim=True) + eps)
    return (s * rstd * weight.to(torch.float32)).to(x.dtype), residual_out


def make_inputs(axes, inputs, params, generator, device):
    """Params: ``row_stride`` lays the rows of x and residual out that many elements apart (wider
    than ``hidden``); ``x_scale`` multiplies x and residual."""
    stride = params.get("row_stride")
    scale = params.get("x_scale")
    for name in ("x", "residual"):
        t = inputs[name]
        if stride:
            wide = torch.randn(axes["rows"], stride, generator=generator, device=device).to(t.dtype)
            t = wide[:, : axes["hidden"]]
        if scale:
            t.copy_(t.to(torch.float32) * scale)
        inputs[name] = t
    return inputs
