"""rmsnorm: out = x / sqrt(mean(x^2) + eps) * weight over the rows of x [rows, hidden].

Normalized and weighted in float32, rounded once to the storage dtype (FlashInfer's and Llama's
convention). Rows may be strided; any hidden size; 0 rows allowed.
"""

from pathlib import Path

from kernelarena.data import Tolerance
from kernelarena.library import _norm_family as norm
from kernelarena.library._spec import OperatorSpec, scalar

# Tolerance of out in float32: the reference's value up to summation order (a few ulps) and rsqrtf
# (2 ulps).
_FP32_OUT = Tolerance(atol=1e-5, rtol=1e-5)
_EPS = 1e-6
_EDGE_CASES = (
    # float16 squares overflow past 256; the sum must be taken in float32.
    norm.edge_case(_EPS, {"x_scale": 1e4}, ("fp16",)),
    # mean(x^2) ~ 1e-8 against eps = 1e-6: eps must be added, not dropped.
    norm.edge_case(_EPS, {"x_scale": 1e-4}),
)

OPERATOR = OperatorSpec(
    name="rmsnorm",
    op_type="norm",
    description=__doc__.strip().splitlines()[0],
    folder=Path(__file__).parent,
    axes=norm.AXES,
    inputs={
        "x": norm.X,
        "weight": norm.WEIGHT,
        "eps": scalar("float32", "added to mean(x^2) before the square root"),
    },
    outputs={"out": norm.OUT},
    bytes_moved="nbytes('x') + nbytes('weight') + nbytes('out')",
    flops="4 * rows * hidden",
    variants=norm.variants(_FP32_OUT),
    workloads=norm.workloads(_EPS, _EDGE_CASES),
    solutions=(
        *norm.kernels(
            "rmsnorm",
            "run",
            triton_description="Rows held in registers (one pass over memory) up to 32K wide, "
            "several rows per program for narrow rows; two passes beyond. Warps per program "
            "and the weight load's place tuned on the device per width, row bucket and dtype.",
            cuda_description="16-byte vector loads, rows in registers, warp-shuffle reductions; "
            "threads per row chosen from the width and the row count.",
        ),
        *norm.peers(
            eager_description="torch eager: torch.nn.functional.rms_norm.",
            liger_description="Liger-Kernel LigerRMSNormFunction in its 'gemma' casting mode "
            "(float32 math, one rounding: this definition).",
        ),
    ),
)
