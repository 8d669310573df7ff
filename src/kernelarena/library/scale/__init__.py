"""scale: out = x * factor over a [rows, cols] tensor, the worked example of an operator."""

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
_SHAPES_CORRECTNESS = [(0, 4096), (1, 1), (3, 5120), (33, 8192), (5, 16384)]
_SHAPES_PERFORMANCE = [(128, 4096), (4096, 4096), (32768, 8192)]

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
    variants=(
        Variant("fp32", {"dtype": "float32"}, {"out": Tolerance(atol=1e-6, rtol=1e-6)}),
        Variant("fp16", {"dtype": "float16"}, {"out": Tolerance(atol=1e-3, rtol=1e-3)}),
        Variant("bf16", {"dtype": "bfloat16"}, {"out": Tolerance(atol=1e-2, rtol=1e-2)}),
    ),
    workloads=(
        *(WorkloadSpec({"rows": r, "cols": c}, {"factor": 1.7}, ("smoke", "correctness")) for r, c in _SHAPES_SMOKE),
        *(WorkloadSpec({"rows": r, "cols": c}, {"factor": -0.3}, ("correctness",)) for r, c in _SHAPES_CORRECTNESS),
        WorkloadSpec({"rows": 9, "cols": 1000}, {"factor": 3.0}, ("correctness",), {"row_stride": 1536}),
        *(WorkloadSpec({"rows": r, "cols": c}, {"factor": 1.5}, ("performance",)) for r, c in _SHAPES_PERFORMANCE),
    ),
    solutions=(
        SolutionSpec("triton", "triton", "triton/scale.py::run", targets=("cuda", "cpu"),
                     description="One program per block of a row; loads and stores coalesced."),
        SolutionSpec("cuda", "cuda", "cuda/scale.cu::run", targets=("sm_90a",),
                     description="16-byte vector loads per thread where rows are aligned."),
        SolutionSpec("torch_eager", "python", "torch/eager.py::run", targets=("cuda", "cpu"),
                     description="torch eager: torch.mul into out."),
    ),
)
