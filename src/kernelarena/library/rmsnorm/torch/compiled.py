import torch

from kernelarena.library.per_shape import compile_per_shape


def _rmsnorm(x, weight, eps):
    xf = x.float()
    rstd = torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + eps)
    return (xf * rstd * weight.float()).to(x.dtype)


# Static shapes: with dynamic shapes Inductor cannot hold a row in one persistent reduction and
# loops over it instead, which is not the peer at its best. One graph cache per shape and dtype
# (kernelarena.library.per_shape): dynamo's limit of 8 graphs per function would otherwise send
# every later shape to eager code.
_rmsnorm_compiled = compile_per_shape(_rmsnorm)


def run(x, weight, eps):
    return _rmsnorm_compiled(x, weight, eps)
