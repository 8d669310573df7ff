import torch

from kernelarena.library.per_shape import compile_per_shape


def _layernorm(x, weight, bias, eps):
    xf = x.float()
    centered = xf - xf.mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(centered.square().mean(dim=-1, keepdim=True) + eps)
    return (centered * rstd * weight.float() + bias.float()).to(x.dtype)


# Static shapes: with dynamic shapes Inductor cannot hold a row in one persistent reduction and
# loops over it instead, which is not the peer at its best. One graph cache per shape and dtype
# (kernelarena.library.per_shape): dynamo's limit of 8 graphs per function would otherwise send
# every later shape to eager code.
_layernorm_compiled = compile_per_shape(_layernorm)


def run(x, weight, bias, eps):
    return _layernorm_compiled(x, weight, bias, eps)
