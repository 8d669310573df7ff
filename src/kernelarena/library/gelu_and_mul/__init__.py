"""gelu_and_mul and gelu_tanh_and_mul: out = gelu(x[:, :d]) * x[:, d:], the GeGLU activation.

FlashInfer's names: ``gelu_and_mul`` is the exact GELU, 0.5 g (1 + erf(g / sqrt 2)), and
``gelu_tanh_and_mul`` its tanh approximation, 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
Both are declared here and share this folder's kernels (``run`` and ``run_tanh`` in each solution
file); ``library/gelu_tanh_and_mul/`` only exposes the second to the library.

Conventions as silu_and_mul's: x is [rows, 2 d], gate first; axes ``rows``, ``two_d`` (the input
width) and ``d = two_d // 2`` derived, ``two_d`` even. Bytes moved: rows * 2 d read, rows * d
written.
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

# The kernels compute gelu(gate) * up in float32 and round once. fp32: the tanh form runs through
# one fast exp and one fast division (below 3e-6 relative), the exact form through a branch-free
# erfc (the normal CDF within 2.3e-7 absolute, 1.2e-6 relative for g > -3); the float32 reference
# itself loses about 6e-8 |g| absolute in 1 + tanh or 1 + erf near -1. fp16
# and bf16: the final rounding, half an ulp; peers that round gelu(gate) before the product (torch
# eager, Liger) reach twice that, still inside.
# The CUDA solution embeds the gated activations' template (library/_shared/).
_CUDA_SHARED = ("device.cuh", "gated_activation.cuh", "rows_elementwise.cuh", "vector_io.cuh")
_TOLERANCES = {
    "fp32": Tolerance(atol=1e-5, rtol=1e-5),
    "fp16": Tolerance(atol=1e-3, rtol=1e-3),
    "bf16": Tolerance(atol=1e-2, rtol=1e-2),
}
_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


# The same shapes for both forms.
_WORKLOADS = (
    *(
        WorkloadSpec({"rows": r, "two_d": w}, tags=("smoke", "correctness"))
        for r, w in _SHAPES_SMOKE
    ),
    *(WorkloadSpec({"rows": r, "two_d": w}, tags=("correctness",)) for r, w in _SHAPES_CORRECTNESS),
    WorkloadSpec({"rows": 9, "two_d": 2000}, tags=("correctness",), params={"row_stride": 3072}),
    # The exponentials overflow at gate = -30 and vanish at +30: GELU gives -0 and 30.
    WorkloadSpec({"rows": 4, "two_d": 512}, tags=("correctness",), params={"gate_range": 30.0}),
    # A million rows, past CUDA's gridDim.y (65535): the kernels loop over rows.
    WorkloadSpec(
        {"rows": 1_000_000, "two_d": 272}, tags=("correctness", "large"), variants=("bf16",)
    ),
    *(WorkloadSpec({"rows": r, "two_d": w}, tags=("performance",)) for r, w in _SHAPES_PERFORMANCE),
)


def _operator(tanh: bool) -> OperatorSpec:
    gelu = "gelu_tanh" if tanh else "gelu"
    return OperatorSpec(
        name=f"{gelu}_and_mul",
        op_type="activation",
        description=f"out = {gelu}(x[:, :d]) * x[:, d:] (gate first), in float32, rounded once.",
        folder=Path(__file__).parent,
        reference="reference_tanh.py" if tanh else "reference.py",
        axes={
            "rows": var("rows of x (any count, 0 included)"),
            "two_d": var("width of x: the gate half then the up half"),
            "d": derived("two_d // 2", "width of out"),
        },
        constraints=("two_d % 2 == 0",),
        inputs={"x": tensor(["rows", "two_d"], "{dtype}", "gate | up; rows may be strided")},
        outputs={"out": tensor(["rows", "d"], "{dtype}")},
        bytes_moved="nbytes('x') + nbytes('out')",
        flops=("10" if tanh else "8")
        + " * rows * d",  # the GELU polynomial or erf, then the product
        variants=tuple(
            Variant(s, {"dtype": _DTYPES[s]}, {"out": t}) for s, t in _TOLERANCES.items()
        ),
        workloads=_WORKLOADS,
        solutions=(*_kernels(tanh), *_peers(tanh)),
    )


def _kernels(tanh: bool) -> tuple[SolutionSpec, ...]:
    """This folder's own kernels; each file holds both forms (``run``, ``run_tanh``)."""
    entry = "run_tanh" if tanh else "run"
    return (
        SolutionSpec(
            "triton",
            "triton",
            f"triton/gelu_and_mul.py::{entry}",
            shared=("gated_activation.py", "tiles.py", "tuning.py"),
            targets=("cuda", "cpu"),
            description="Tiles tuned on the device (6 candidates, 512 to 4096 outputs)"
            + (
                "; GELU as g * sigmoid(2 z) with exp2."
                if tanh
                else "; the normal CDF from a branch-free erfc (one exp2)."
            ),
        ),
        SolutionSpec(
            "cuda",
            "cuda",
            f"cuda/gelu_and_mul.cu::{entry}",
            shared=_CUDA_SHARED,
            targets=("sm_90a",),
            description="16-byte streaming loads of both halves"
            + (
                "; GELU as g * sigmoid(2 z) with __expf."
                if tanh
                else "; the normal CDF from a branch-free erfc (one exp2f)."
            ),
        ),
    )


def _peers(tanh: bool) -> list[SolutionSpec]:
    """What the kernels are measured against: torch eager and compiled, and Liger for the tanh
    form (Liger has no exact-GELU kernel)."""
    entry = "run_tanh" if tanh else "run"
    peers = [
        SolutionSpec(
            "torch_eager",
            "python",
            f"torch/eager.py::{entry}",
            targets=("cuda", "cpu"),
            description=f"torch eager: F.gelu (approximate={'tanh' if tanh else 'none'}), "
            "then torch.mul.",
        ),
        SolutionSpec(
            "torch_compile",
            "python",
            f"torch/compiled.py::{entry}",
            targets=("cuda",),
            destination_passing_style=False,
            description="torch.compile (Inductor, static shapes): one fused kernel.",
        ),
    ]
    if tanh:
        peers.append(
            SolutionSpec(
                "liger",
                "python",
                "torch/liger.py::run_tanh",
                targets=("cuda",),
                destination_passing_style=False,
                dependencies=("liger-kernel",),
                description="Liger-Kernel LigerGELUMulFunction on the two halves "
                "(copied contiguous).",
            )
        )
    return peers


# One folder serves both of FlashInfer's names: gelu_and_mul (erf) and gelu_tanh_and_mul.
OPERATORS = (_operator(tanh=False), _operator(tanh=True))
