import torch


def _layernorm(x, weight, bias, eps):
    xf = x.float()
    centered = xf - xf.mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(centered.square().mean(dim=-1, keepdim=True) + eps)
    return (centered * rstd * weight.float() + bias.float()).to(x.dtype)


# Static shapes: with dynamic shapes Inductor cannot hold a row in one persistent reduction and
# loops over it instead, which is not the peer at its best. Each new shape compiles anew.
_layernorm_compiled = torch.compile(_layernorm, dynamic=False)


def run(x, weight, bias, eps):
    return _layernorm_compiled(x, weight, bias, eps)
