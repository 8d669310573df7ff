"""rmsnorm: out = x / sqrt(mean(x^2) + eps) * weight over the rows of x [rows, hidden].

Normalized and weighted in float32, rounded once to the storage dtype (FlashInfer's and Llama's
convention). Rows may be strided; any hidden size; 0 rows allowed.
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

# Tolerances: every solution computes the same float32 value as the reference up to summation
# order (a few ulps of float32) and rsqrtf (2 ulps), so the rounded output is the reference's or
# one rounding step away: 2^-7 relative in bfloat16, 2^-10 in float16.
# The solutions embed the norms' launch plans, the tuner and the CUDA helpers (library/_shared/).
_TRITON_SHARED = ("row_norm.py", "tuning.py")
_CUDA_SHARED = ("device.cuh", "norm_rows.cuh", "reduce.cuh", "vector_io.cuh")
_TOLERANCES = {
    "fp32": {"out": Tolerance(atol=1e-5, rtol=1e-5)},
    "fp16": {"out": Tolerance(atol=1e-3, rtol=1e-3)},
    "bf16": {"out": Tolerance(atol=1e-2, rtol=1e-2)},
}
_EPS = 1e-6
_SMOKE = [(1, 128), (7, 1000)]
# 4097 and 1001: rows not a whole number of 16-byte vectors; 40000: past the single-pass limit
# of the Triton solution (a row no longer fits in one program's registers).
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
        # float16 squares overflow past 256; the sum must be taken in float32.
        WorkloadSpec(
            {"rows": 6, "hidden": 2048}, eps, ("correctness",), {"x_scale": 1e4}, ("fp16",)
        ),
        # mean(x^2) ~ 1e-8 against eps = 1e-6: eps must be added, not dropped.
        WorkloadSpec({"rows": 6, "hidden": 2048}, eps, ("correctness",), {"x_scale": 1e-4}),
        WorkloadSpec(
            {"rows": 1_000_000, "hidden": 1000}, eps, ("correctness", "large"), {}, ("bf16",)
        ),
        *(WorkloadSpec({"rows": r, "hidden": h}, eps, ("performance",)) for r, h in _PERFORMANCE),
    )


OPERATOR = OperatorSpec(
    name="rmsnorm",
    op_type="norm",
    description=__doc__.strip().splitlines()[0],
    folder=Path(__file__).parent,
    axes={"rows": var("rows of x (any count, 0 included)"), "hidden": var("elements per row")},
    inputs={
        "x": tensor(["rows", "hidden"], "{dtype}", "input; rows may be strided"),
        "weight": tensor(["hidden"], "{dtype}", "per-column scale, contiguous"),
        "eps": scalar("float32", "added to mean(x^2) before the square root"),
    },
    outputs={"out": tensor(["rows", "hidden"], "{dtype}")},
    bytes_moved="nbytes('x') + nbytes('weight') + nbytes('out')",
    flops="4 * rows * hidden",
    variants=tuple(
        Variant(suffix, {"dtype": dtype}, _TOLERANCES[suffix])
        for suffix, dtype in (("fp32", "float32"), ("fp16", "float16"), ("bf16", "bfloat16"))
    ),
    workloads=_workloads(),
    solutions=(
        SolutionSpec(
            "triton",
            "triton",
            "triton/rmsnorm.py::run",
            shared=_TRITON_SHARED,
            targets=("cuda", "cpu"),
            description="Rows held in registers (one pass over memory) up to 32K wide, "
            "several rows per program for narrow rows; two passes beyond. Warps per program "
            "and the weight load's place tuned on the device per width, row bucket and dtype.",
        ),
        SolutionSpec(
            "cuda",
            "cuda",
            "cuda/rmsnorm.cu::run",
            shared=_CUDA_SHARED,
            targets=("sm_90a",),
            description="16-byte vector loads, rows in registers, warp-shuffle reductions; "
            "threads per row chosen from the width and the row count.",
        ),
        SolutionSpec(
            "torch_eager",
            "python",
            "torch/eager.py::run",
            targets=("cuda", "cpu"),
            description="torch eager: torch.nn.functional.rms_norm.",
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
            description="Liger-Kernel LigerRMSNormFunction in its 'gemma' casting mode "
            "(float32 math, one rounding: this definition).",
            dependencies=("liger-kernel",),
            destination_passing_style=False,
        ),
    ),
)
