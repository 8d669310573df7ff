from liger_kernel.ops.layer_norm import LigerLayerNormFunction


def run(x, weight, bias, eps):
    return LigerLayerNormFunction.apply(x, weight, bias, eps)
