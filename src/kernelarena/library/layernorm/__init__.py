"""layernorm: out = (x - mean) / sqrt(var + eps) * weight + bias over the rows of x [rows, hidden].

Mean and (biased) variance in float32, the variance from x - mean; normalized, weighted and shifted
in float32, rounded once to the storage dtype. Rows may be strided; any hidden size; 0 rows allowed.
"""

from pathlib import Path

from kernelarena.data import Tolerance
from kernelarena.library._spec import (
    OperatorSpec,
    SolutionSpec,
    Variant,
    WorkloadSpec,
    scalar,
    tensor,
    var,
)

# Tolerances: solutions compute the reference's float32 value up to summation order and rsqrtf.
# Unlike rmsnorm the result is a difference, (x - mean) * rstd * weight + bias, whose terms reach
# ~20 while the result can be near 0: float32 errors of ~1e-6 relative on those terms are absolute
# errors of ~2e-5 on the result, hence atol 1e-4 in float32. The rounded 16-bit outputs are the
# reference's or one rounding step away: 2^-7 relative in bfloat16, 2^-10 in float16.
# The solutions embed the norms' launch plans, the tuner and the CUDA helpers (library/_shared/).
_TRITON_SHARED = ("row_norm.py", "tuning.py")
_CUDA_SHARED = ("device.cuh", "norm_rows.cuh", "reduce.cuh", "vector_io.cuh")
_TOLERANCES = {
    "fp32": {"out": Tolerance(atol=1e-4, rtol=1e-5)},
    "fp16": {"out": Tolerance(atol=1e-3, rtol=1e-3)},
    "bf16": {"out": Tolerance(atol=1e-2, rtol=1e-2)},
}
_EPS = 1e-5
_SMOKE = [(1, 128), (7, 1000)]
_CORRECTNESS = [(0, 4096), (1, 1), (3, 5120), (33, 8192), (5, 16384), (4, 4097), (6, 1001)]
_PERFORMANCE = [(128, 4096), (4096, 4096), (32768, 8192)]


def _workloads() -> tuple[WorkloadSpec, ...]:
    eps = {"eps": _EPS}
    return (
        *(WorkloadSpec({"rows": r, "hidden": h}, eps, ("smoke", "correctness")) for r, h in _SMOKE),
        *(WorkloadSpec({"rows": r, "hidden": h}, eps, ("correctness",)) for r, h in _CORRECTNESS),
        WorkloadSpec({"rows": 2, "hidden": 40000}, eps, ("correctness",)),
        WorkloadSpec({"rows": 9, "hidden": 1000}, eps, ("correctness",), {"row_stride": 1536}),
        WorkloadSpec({"rows": 5, "hidden": 4096}, eps, ("correctness",), {"row_stride": 4100}),
        # Mean 1000 against a spread of 1: E[x^2] - E[x]^2 in float32 would lose the variance.
        # bfloat16 only: there the reference's own float32 mean (~1e-3 off) is far inside tolerance.
        WorkloadSpec(
            {"rows": 6, "hidden": 2048}, eps, ("correctness",), {"x_offset": 1000.0}, ("bf16",)
        ),
        # A spread of 1e-3 against eps = 1e-5: eps must be added, not dropped.
        WorkloadSpec({"rows": 6, "hidden": 2048}, eps, ("correctness",), {"x_scale": 1e-3}),
        WorkloadSpec(
            {"rows": 1_000_000, "hidden": 1000}, eps, ("correctness", "large"), {}, ("bf16",)
        ),
        *(WorkloadSpec({"rows": r, "hidden": h}, eps, ("performance",)) for r, h in _PERFORMANCE),
    )


OPERATOR = OperatorSpec(
    name="layernorm",
    op_type="norm",
    description=__doc__.strip().splitlines()[0],
    folder=Path(__file__).parent,
    axes={"rows": var("rows of x (any count, 0 included)"), "hidden": var("elements per row")},
    inputs={
        "x": tensor(["rows", "hidden"], "{dtype}", "input; rows may be strided"),
        "weight": tensor(["hidden"], "{dtype}", "per-column scale, contiguous"),
        "bias": tensor(["hidden"], "{dtype}", "per-column shift, contiguous"),
        "eps": scalar("float32", "added to the variance before the square root"),
    },
    outputs={"out": tensor(["rows", "hidden"], "{dtype}")},
    bytes_moved="nbytes('x') + nbytes('weight') + nbytes('bias') + nbytes('out')",
    flops="7 * rows * hidden",
    variants=tuple(
        Variant(suffix, {"dtype": dtype}, _TOLERANCES[suffix])
        for suffix, dtype in (("fp32", "float32"), ("fp16", "float16"), ("bf16", "bfloat16"))
    ),
    workloads=_workloads(),
    solutions=(
        SolutionSpec(
            "triton",
            "triton",
            "triton/layernorm.py::run",
            shared=_TRITON_SHARED,
            targets=("cuda", "cpu"),
            description="Rows held in registers (one pass over memory, exact two-pass "
            "variance) up to 32K wide; shifted sums over two passes beyond. Warps per program "
            "and the weight and bias loads' place tuned on the device.",
        ),
        SolutionSpec(
            "cuda",
            "cuda",
            "cuda/layernorm.cu::run",
            shared=_CUDA_SHARED,
            targets=("sm_90a",),
            description="x and bias staged in shared memory by cp.async, 16-byte accesses, "
            "one pass over HBM, exact two-pass variance from shared memory.",
        ),
        SolutionSpec(
            "torch_eager",
            "python",
            "torch/eager.py::run",
            targets=("cuda", "cpu"),
            description="torch eager: torch.nn.functional.layer_norm.",
            destination_passing_style=False,
        ),
        SolutionSpec(
            "torch_compile",
            "python",
            "torch/compiled.py::run",
            targets=("cuda",),
            description="torch.compile (static shapes) of the float32 formula.",
            destination_passing_style=False,
        ),
        SolutionSpec(
            "liger",
            "python",
            "torch/liger.py::run",
            targets=("cuda",),
            description="Liger-Kernel LigerLayerNormFunction.",
            dependencies=("liger-kernel",),
            destination_passing_style=False,
        ),
    ),
)
