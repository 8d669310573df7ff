"""scale: out = x * factor over a [rows, cols] tensor, the worked example of an operator.

Read this folder as the model for a memory-bound operator:
- ``reference.py``: the float32 reference and ``make_inputs`` (strided rows via ``row_stride``).
- ``triton/scale.py``, ``cuda/scale.cu``: the kernels, 16-byte accesses, streaming loads, 64-bit
  row offsets, tiles sized for the shape.
- ``torch/eager.py``, ``torch/compiled.py``: the peers, solutions of their own so that
  ``kernelarena run`` shows everyone side by side.
Bytes moved: x read once and out written once (``nbytes`` counts the logical shape, so strided rows
do not inflate it).
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

_SHAPES_SMOKE = [(1, 128), (7, 1000)]
_SHAPES_CORRECTNESS = [(0, 4096), (1, 1), (3, 5120), (33, 8192), (5, 16384), (2, 1001)]
_SHAPES_PERFORMANCE = [(128, 4096), (4096, 4096), (32768, 8192)]

# Every solution computes x * factor in float32 and rounds once, as the reference does: the only
# error is that rounding (half an ulp: 2^-9 in bf16, 2^-12 in fp16, none beyond float32 in fp32).
_TOLERANCES = {
    "fp32": Tolerance(atol=1e-6, rtol=1e-6),
    "fp16": Tolerance(atol=1e-3, rtol=1e-3),
    "bf16": Tolerance(atol=1e-2, rtol=1e-2),
}
_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}

OPERATOR = OperatorSpec(
    name="scale",
    op_type="elementwise",
    description="out = x * factor, element-wise, computed in float32 and rounded once.",
    folder=Path(__file__).parent,
    axes={"rows": var("rows of x (any count, 0 included)"), "cols": var("elements per row")},
    inputs={
        "x": tensor(["rows", "cols"], "{dtype}", "input; rows may be strided"),
        "factor": scalar("float32", "the scale factor"),
    },
    outputs={"out": tensor(["rows", "cols"], "{dtype}")},
    bytes_moved="nbytes('x') + nbytes('out')",
    flops="rows * cols",
    variants=tuple(Variant(s, {"dtype": _DTYPES[s]}, {"out": t}) for s, t in _TOLERANCES.items()),
    workloads=(
        *(
            WorkloadSpec({"rows": r, "cols": c}, {"factor": 1.7}, ("smoke", "correctness"))
            for r, c in _SHAPES_SMOKE
        ),
        *(
            WorkloadSpec({"rows": r, "cols": c}, {"factor": -0.3}, ("correctness",))
            for r, c in _SHAPES_CORRECTNESS
        ),
        WorkloadSpec(
            {"rows": 9, "cols": 1000}, {"factor": 3.0}, ("correctness",), {"row_stride": 1536}
        ),
        # A million rows, past CUDA's gridDim.y (65535): the kernels loop over rows.
        WorkloadSpec(
            {"rows": 1_000_000, "cols": 136},
            {"factor": 0.5},
            ("correctness", "large"),
            variants=("bf16",),
        ),
        *(
            WorkloadSpec({"rows": r, "cols": c}, {"factor": 1.5}, ("performance",))
            for r, c in _SHAPES_PERFORMANCE
        ),
    ),
    solutions=(
        SolutionSpec(
            "triton",
            "triton",
            "triton/scale.py::run",
            shared=("tiles.py", "tuning.py"),
            targets=("cuda", "cpu"),
            description="Tiles tuned on the device (6 candidates, 512 to 4096 elements); "
            "16-byte accesses.",
        ),
        SolutionSpec(
            "cuda",
            "cuda",
            "cuda/scale.cu::run",
            shared=("device.cuh", "rows_elementwise.cuh", "vector_io.cuh"),
            targets=("sm_90a",),
            description="16-byte vector accesses, streaming loads, two per thread in flight.",
        ),
        SolutionSpec(
            "torch_eager",
            "python",
            "torch/eager.py::run",
            targets=("cuda", "cpu"),
            description="torch eager: torch.mul into out.",
        ),
        SolutionSpec(
            "torch_compile",
            "python",
            "torch/compiled.py::run",
            targets=("cuda",),
            destination_passing_style=False,
            description="torch.compile (Inductor, static shapes) of the float32 multiply.",
        ),
    ),
)
