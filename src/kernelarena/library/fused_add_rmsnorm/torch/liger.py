from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction


def run(x, residual, weight, eps):
    # offset 0.0 and the "gemma" casting mode: x + residual rounded to the dtype once, then
    # normalized and weighted in float32 and rounded once, which is this definition.
    out, residual_out = LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, 0.0, "gemma")
    return out, residual_out
