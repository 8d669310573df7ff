"""layernorm: out = (x - mean) / sqrt(var + eps) * weight + bias over the rows of x [rows, hidden].

Mean and (biased) variance in float32, the variance from x - mean; normalized, weighted and shifted
in float32, rounded once to the storage dtype. Rows may be strided; any hidden size; 0 rows allowed.
"""

from pathlib import Path

from kernelarena.data import Tolerance
from kernelarena.library import _norm_family as norm
from kernelarena.library._spec import OperatorSpec, scalar, tensor

# Tolerance of out in float32: solutions compute the reference's value up to summation order and
# rsqrtf. Unlike rmsnorm the result is a difference, (x - mean) * rstd * weight + bias, whose terms
# reach ~20 while the result can be near 0: float32 errors of ~1e-6 relative on those terms are
# absolute errors of ~2e-5 on the result, hence atol 1e-4.
_FP32_OUT = Tolerance(atol=1e-4, rtol=1e-5)
_EPS = 1e-5
_EDGE_CASES = (
    # Mean 1000 against a spread of 1: E[x^2] - E[x]^2 in float32 would lose the variance.
    # bfloat16 only: there the reference's own float32 mean (~1e-3 off) is far inside tolerance.
    norm.edge_case(_EPS, {"x_offset": 1000.0}, ("bf16",)),
    # A spread of 1e-3 against eps = 1e-5: eps must be added, not dropped.
    norm.edge_case(_EPS, {"x_scale": 1e-3}),
)

OPERATOR = OperatorSpec(
    name="layernorm",
    op_type="norm",
    description=__doc__.strip().splitlines()[0],
    folder=Path(__file__).parent,
    axes=norm.AXES,
    inputs={
        "x": norm.X,
        "weight": norm.WEIGHT,
        "bias": tensor(["hidden"], "{dtype}", "per-column shift, contiguous"),
        "eps": scalar("float32", "added to the variance before the square root"),
    },
    outputs={"out": norm.OUT},
    bytes_moved="nbytes('x') + nbytes('weight') + nbytes('bias') + nbytes('out')",
    flops="7 * rows * hidden",
    variants=norm.variants(_FP32_OUT),
    workloads=norm.workloads(_EPS, _EDGE_CASES),
    solutions=(
        *norm.kernels(
            "layernorm",
            "run",
            triton_description="Rows held in registers (one pass over memory, exact two-pass "
            "variance) up to 32K wide; shifted sums over two passes beyond. Warps per program "
            "and the weight and bias loads' place tuned on the device.",
            cuda_description="x and bias staged in shared memory by cp.async, 16-byte accesses, "
            "one pass over HBM, exact two-pass variance from shared memory.",
        ),
        *norm.peers(
            eager_description="torch eager: torch.nn.functional.layer_norm.",
            liger_description="Liger-Kernel LigerLayerNormFunction.",
        ),
    ),
)
