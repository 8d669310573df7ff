"""silu_and_mul: out = silu(x[:, :d]) * x[:, d:], the SwiGLU activation of LLM MLPs.

Conventions (vLLM's and FlashInfer's): x is [rows, 2 d] with the gate in the first half and the
up projection in the second; out is [rows, d]. The axes are ``rows``, ``two_d`` (the input width,
what benchmarks call the hidden size) and ``d = two_d // 2``, derived, with ``two_d`` even as a
constraint; the free axes are those of the input, so arguments bind every axis from x alone.
Bytes moved: rows * 2 d read and rows * d written.
"""

from pathlib import Path

from kernelarena.data import Tolerance
from kernelarena.library._spec import (
    OperatorSpec,
    SolutionSpec,
    Variant,
    WorkloadSpec,
    derived,
    tensor,
    var,
)

# (rows, two_d): two_d is the input width, d = two_d // 2 the output width.
_SHAPES_SMOKE = [(1, 256), (7, 2000)]
_SHAPES_CORRECTNESS = [(0, 8192), (1, 2), (3, 10240), (33, 16384), (5, 32768), (2, 2002)]
_SHAPES_PERFORMANCE = [(128, 4096), (4096, 4096), (32768, 8192)]

# The kernels compute silu(gate) * up in float32 and round once. fp32: __expf / tl.exp2 and the fast
# division add below 3e-6 relative (the float32 reference rounds too). fp16 and bf16: the final
# rounding, half an ulp (2^-12 and 2^-9 relative); peers that round silu(gate) before the product
# (torch eager) reach twice that, still inside.
# The CUDA solution embeds the gated activations' template (library/_shared/).
_CUDA_SHARED = ("device.cuh", "gated_activation.cuh", "rows_elementwise.cuh", "vector_io.cuh")
_TOLERANCES = {
    "fp32": Tolerance(atol=1e-5, rtol=1e-5),
    "fp16": Tolerance(atol=1e-3, rtol=1e-3),
    "bf16": Tolerance(atol=1e-2, rtol=1e-2),
}
_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}

OPERATOR = OperatorSpec(
    name="silu_and_mul",
    op_type="activation",
    description="out = silu(x[:, :d]) * x[:, d:] (gate first), in float32, rounded once.",
    folder=Path(__file__).parent,
    axes={
        "rows": var("rows of x (any count, 0 included)"),
        "two_d": var("width of x: the gate half then the up half"),
        "d": derived("two_d // 2", "width of out"),
    },
    constraints=("two_d % 2 == 0",),
    inputs={"x": tensor(["rows", "two_d"], "{dtype}", "gate | up; rows may be strided")},
    outputs={"out": tensor(["rows", "d"], "{dtype}")},
    bytes_moved="nbytes('x') + nbytes('out')",
    flops="5 * rows * d",  # negate, exp, add, divide, multiply per output
    variants=tuple(Variant(s, {"dtype": _DTYPES[s]}, {"out": t}) for s, t in _TOLERANCES.items()),
    workloads=(
        *(
            WorkloadSpec({"rows": r, "two_d": w}, tags=("smoke", "correctness"))
            for r, w in _SHAPES_SMOKE
        ),
        *(
            WorkloadSpec({"rows": r, "two_d": w}, tags=("correctness",))
            for r, w in _SHAPES_CORRECTNESS
        ),
        WorkloadSpec(
            {"rows": 9, "two_d": 2000}, tags=("correctness",), params={"row_stride": 3072}
        ),
        # exp(-gate) overflows at gate = -100 and vanishes at +100: silu gives -0 and 100.
        WorkloadSpec(
            {"rows": 4, "two_d": 512}, tags=("correctness",), params={"gate_range": 100.0}
        ),
        # A million rows, past CUDA's gridDim.y (65535): the kernels loop over rows.
        WorkloadSpec(
            {"rows": 1_000_000, "two_d": 272}, tags=("correctness", "large"), variants=("bf16",)
        ),
        *(
            WorkloadSpec({"rows": r, "two_d": w}, tags=("performance",))
            for r, w in _SHAPES_PERFORMANCE
        ),
    ),
    solutions=(
        SolutionSpec(
            "triton",
            "triton",
            "triton/silu_and_mul.py::run",
            shared=("gated_activation.py", "tiles.py", "tuning.py"),
            targets=("cuda", "cpu"),
            description="Tiles tuned on the device (6 candidates, 512 to 4096 outputs); exp2 "
            "and fast division.",
        ),
        SolutionSpec(
            "cuda",
            "cuda",
            "cuda/silu_and_mul.cu::run",
            shared=_CUDA_SHARED,
            targets=("sm_90a",),
            description="16-byte streaming loads of both halves, two of each per thread in flight.",
        ),
        SolutionSpec(
            "torch_eager",
            "python",
            "torch/eager.py::run",
            targets=("cuda", "cpu"),
            description="torch eager: F.silu then torch.mul into out (two kernels).",
        ),
        SolutionSpec(
            "torch_compile",
            "python",
            "torch/compiled.py::run",
            targets=("cuda",),
            destination_passing_style=False,
            description="torch.compile (Inductor, static shapes): one fused kernel.",
        ),
        SolutionSpec(
            "liger",
            "python",
            "torch/liger.py::run",
            targets=("cuda",),
            destination_passing_style=False,
            dependencies=("liger-kernel",),
            description="Liger-Kernel LigerSiLUMulFunction on the two halves (copied contiguous).",
        ),
    ),
)
