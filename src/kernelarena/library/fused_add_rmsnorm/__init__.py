"""fused_add_rmsnorm: residual_out = x + residual; out = rmsnorm(residual_out) over rows [rows, hidden].

Two definition families over one reference:
- ``fused_add_rmsnorm``: out of place, outputs ``out`` and ``residual_out``.
- ``fused_add_rmsnorm_inplace``: as FlashInfer does, ``x`` becomes ``out`` and ``residual`` becomes
  ``residual_out``.

Rounding convention (the reference states it): x + residual is added in float32 and rounded once to
the storage dtype; that rounded sum, as stored, is normalized in float32, weighted and rounded once.
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

# out: as rmsnorm (the same float32 value up to summation order and rsqrtf; the rounded output is
# the reference's or one rounding step away: 2^-7 relative in bfloat16, 2^-10 in float16).
# residual_out: exact. It is one float32 addition of two values of the storage dtype, rounded once,
# the same operation in every solution and the reference.
_EXACT = Tolerance(atol=0.0, rtol=0.0)
# The solutions embed the norms' launch plans, the tuner and the CUDA helpers (library/_shared/).
_TRITON_SHARED = ("row_norm.py", "tuning.py")
_CUDA_SHARED = ("device.cuh", "norm_rows.cuh", "reduce.cuh", "vector_io.cuh")
_TOLERANCES = {
    "fp32": {"out": Tolerance(atol=1e-5, rtol=1e-5), "residual_out": _EXACT},
    "fp16": {"out": Tolerance(atol=1e-3, rtol=1e-3), "residual_out": _EXACT},
    "bf16": {"out": Tolerance(atol=1e-2, rtol=1e-2), "residual_out": _EXACT},
}
_EPS = 1e-6
_SMOKE = [(1, 128), (7, 1000)]
_CORRECTNESS = [(0, 4096), (1, 1), (3, 5120), (33, 8192), (5, 16384), (4, 4097), (6, 1001)]
_PERFORMANCE = [(128, 4096), (4096, 4096), (32768, 8192)]
_VARIANTS = tuple(
    Variant(suffix, {"dtype": dtype}, _TOLERANCES[suffix])
    for suffix, dtype in (("fp32", "float32"), ("fp16", "float16"), ("bf16", "bfloat16"))
)


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
            {"rows": 6, "hidden": 2048}, eps, ("correctness",), {"x_scale": 5e3}, ("fp16",)
        ),
        WorkloadSpec({"rows": 6, "hidden": 2048}, eps, ("correctness",), {"x_scale": 1e-4}),
        WorkloadSpec(
            {"rows": 1_000_000, "hidden": 1000}, eps, ("correctness", "large"), {}, ("bf16",)
        ),
        *(WorkloadSpec({"rows": r, "hidden": h}, eps, ("performance",)) for r, h in _PERFORMANCE),
    )


_AXES = {"rows": var("rows of x (any count, 0 included)"), "hidden": var("elements per row")}
_INPUTS = {
    "x": tensor(["rows", "hidden"], "{dtype}", "input; rows may be strided"),
    "residual": tensor(["rows", "hidden"], "{dtype}", "residual stream; rows may be strided"),
    "weight": tensor(["hidden"], "{dtype}", "per-column scale, contiguous"),
    "eps": scalar("float32", "added to the mean square before the square root"),
}
_BYTES = (
    "nbytes('x') + nbytes('residual') + nbytes('weight') + nbytes('out') + nbytes('residual_out')"
)
_TRITON_NOTE = (
    "Rows held in registers (one pass over memory) up to 32K wide; two passes beyond. Plans "
    "tuned on the device (in place: tuned out of place into scratch, then run in place)."
)
_CUDA_NOTE = "x and residual staged in shared memory by cp.async, 16-byte accesses, one pass."
_TILELANG_NOTE = (
    "TileLang: one block a row held in registers, 16-byte chunks a thread, block all-reduce; "
    "a kernel per (hidden, dtype, row layout), compiled on first use (kernelarena[tilelang])."
)

OPERATOR = OperatorSpec(
    name="fused_add_rmsnorm",
    op_type="norm",
    description="residual_out = x + residual (rounded once); out = rmsnorm(residual_out). Out of place.",
    folder=Path(__file__).parent,
    axes=_AXES,
    inputs=_INPUTS,
    outputs={
        "out": tensor(["rows", "hidden"], "{dtype}"),
        "residual_out": tensor(["rows", "hidden"], "{dtype}", "x + residual, rounded once"),
    },
    bytes_moved=_BYTES,
    flops="5 * rows * hidden",
    variants=_VARIANTS,
    workloads=_workloads(),
    solutions=(
        SolutionSpec(
            "triton",
            "triton",
            "triton/fused_add_rmsnorm.py::run",
            shared=_TRITON_SHARED,
            targets=("cuda", "cpu"),
            description=_TRITON_NOTE,
        ),
        SolutionSpec(
            "cuda",
            "cuda",
            "cuda/fused_add_rmsnorm.cu::run",
            shared=_CUDA_SHARED,
            targets=("sm_90a",),
            description=_CUDA_NOTE,
        ),
        SolutionSpec(
            "tilelang",
            "tilelang",
            "tilelang/fused_add_rmsnorm.py::run",
            targets=("cuda",),
            description=_TILELANG_NOTE,
        ),
        SolutionSpec(
            "torch_eager",
            "python",
            "torch/eager.py::run",
            targets=("cuda", "cpu"),
            description="torch eager: add, then torch.nn.functional.rms_norm.",
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
            description="Liger-Kernel LigerFusedAddRMSNormFunction, 'gemma' casting mode "
            "(float32 math, one rounding: this definition).",
            dependencies=("liger-kernel",),
            destination_passing_style=False,
        ),
    ),
)

OPERATOR_INPLACE = OperatorSpec(
    name="fused_add_rmsnorm_inplace",
    op_type="norm",
    description="In place as FlashInfer does: x becomes rmsnorm(x + residual), residual becomes "
    "x + residual (rounded once).",
    folder=Path(__file__).parent,
    axes=_AXES,
    inputs=_INPUTS,
    outputs={
        "out": tensor(["rows", "hidden"], "{dtype}", "written into x", aliases="x"),
        "residual_out": tensor(
            ["rows", "hidden"], "{dtype}", "written into residual", aliases="residual"
        ),
    },
    bytes_moved=_BYTES,
    flops="5 * rows * hidden",
    variants=_VARIANTS,
    workloads=_workloads(),
    solutions=(
        SolutionSpec(
            "triton",
            "triton",
            "triton/fused_add_rmsnorm.py::run_inplace",
            shared=_TRITON_SHARED,
            targets=("cuda", "cpu"),
            description=_TRITON_NOTE,
        ),
        SolutionSpec(
            "cuda",
            "cuda",
            "cuda/fused_add_rmsnorm.cu::run_inplace",
            shared=_CUDA_SHARED,
            targets=("sm_90a",),
            description=_CUDA_NOTE,
        ),
        SolutionSpec(
            "torch_eager",
            "python",
            "torch/eager.py::run_inplace",
            targets=("cuda", "cpu"),
            description="torch eager: add_ into residual, rms_norm, copy_ into x.",
        ),
        SolutionSpec(
            "torch_compile",
            "python",
            "torch/compiled.py::run_inplace",
            targets=("cuda",),
            description="torch.compile (static shapes) of the in-place float32 formula.",
        ),
    ),
)

# Both families; the library loader registers ``OPERATOR`` (and ``OPERATORS`` once it reads it).
OPERATORS = (OPERATOR, OPERATOR_INPLACE)
