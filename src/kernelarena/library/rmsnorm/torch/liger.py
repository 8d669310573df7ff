from liger_kernel.ops.rms_norm import LigerRMSNormFunction


def run(x, weight, eps):
    # offset 0.0 and the "gemma" casting mode: x and weight in float32, the product rounded once,
    # which is this definition ("llama" mode rounds x * rstd before multiplying by weight).
    return LigerRMSNormFunction.apply(x, weight, eps, 0.0, "gemma")
