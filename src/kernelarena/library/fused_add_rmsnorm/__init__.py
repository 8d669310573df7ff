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
from kernelarena.library import _norm_family as norm
from kernelarena.library._spec import OperatorSpec, SolutionSpec, scalar, tensor

# out: as rmsnorm (the reference's float32 value up to summation order and rsqrtf).
# residual_out: exact. It is one float32 addition of two values of the storage dtype, rounded once,
# the same operation in every solution and the reference.
_VARIANTS = norm.variants(
    Tolerance(atol=1e-5, rtol=1e-5), {"residual_out": Tolerance(atol=0.0, rtol=0.0)}
)
_EPS = 1e-6
_WORKLOADS = norm.workloads(
    _EPS,
    (
        # float16 squares overflow past 256; the sum must be taken in float32.
        norm.edge_case(_EPS, {"x_scale": 5e3}, ("fp16",)),
        norm.edge_case(_EPS, {"x_scale": 1e-4}),
    ),
)

_INPUTS = {
    "x": norm.X,
    "residual": tensor(["rows", "hidden"], "{dtype}", "residual stream; rows may be strided"),
    "weight": norm.WEIGHT,
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
    axes=norm.AXES,
    inputs=_INPUTS,
    outputs={
        "out": norm.OUT,
        "residual_out": tensor(["rows", "hidden"], "{dtype}", "x + residual, rounded once"),
    },
    bytes_moved=_BYTES,
    flops="5 * rows * hidden",
    variants=_VARIANTS,
    workloads=_WORKLOADS,
    solutions=(
        *norm.kernels("fused_add_rmsnorm", "run", _TRITON_NOTE, _CUDA_NOTE),
        SolutionSpec(
            "tilelang",
            "tilelang",
            "tilelang/fused_add_rmsnorm.py::run",
            targets=("cuda",),
            description=_TILELANG_NOTE,
        ),
        *norm.peers(
            eager_description="torch eager: add, then torch.nn.functional.rms_norm.",
            liger_description="Liger-Kernel LigerFusedAddRMSNormFunction, 'gemma' casting mode "
            "(float32 math, one rounding: this definition).",
        ),
    ),
)

OPERATOR_INPLACE = OperatorSpec(
    name="fused_add_rmsnorm_inplace",
    op_type="norm",
    description="In place as FlashInfer does: x becomes rmsnorm(x + residual), residual becomes "
    "x + residual (rounded once).",
    folder=Path(__file__).parent,
    axes=norm.AXES,
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
    workloads=_WORKLOADS,
    solutions=(
        *norm.kernels("fused_add_rmsnorm", "run_inplace", _TRITON_NOTE, _CUDA_NOTE),
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
