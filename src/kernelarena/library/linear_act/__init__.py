"""linear_act: out = act(x @ weight^T + bias), one Definition per (activation, dtype).

Definitions are named ``linear_<activation>_<dtype>`` (``linear_gelu_tanh_bf16``); op_type
``linear_act``. The bias is always a real input. The activation is part of the Definition, not an argument: each one's reference names it (see
``_LinearActSpec``) and each solution has one entry point per activation (``run_gelu_tanh``...).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kernelarena.data import Definition, Tolerance
from kernelarena.library._spec import (
    OperatorSpec,
    SolutionSpec,
    Variant,
    WorkloadSpec,
    tensor,
    var,
)

ACTIVATIONS = ("gelu_tanh", "gelu", "silu", "relu", "none")
# cuBLASLt's epilogues: GELU_BIAS (the tanh form), RELU_BIAS and BIAS. It has no SiLU and no erf GELU.
CUBLASLT_ACTIVATIONS = ("gelu_tanh", "relu", "none")
DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


def _tolerance(activation: str, dtype: str) -> Tolerance:
    # Kernel and reference see the same 16-bit inputs; products are exact in fp32 and only the
    # accumulation order differs (~1e-6 relative), so after the single rounding to the output
    # dtype the two differ by at most one ulp where that difference straddles a rounding
    # boundary: 2^-8..2^-7 relative for bf16, 2^-10 for fp16. gelu/silu evaluated with the
    # hardware's approximate exp2/tanh (relative error up to 2^-11, times |y|/2 <= 2 for |y| <= 4)
    # add up to ~1e-3 absolute, which matters for fp16 only; torch peers that round the linear
    # output before the activation add one more rounding of the same size.
    if dtype == "bf16":
        return Tolerance(atol=1e-2, rtol=1e-2)
    if activation in ("none", "relu"):
        return Tolerance(atol=1e-3, rtol=1e-3)
    return Tolerance(atol=2e-3, rtol=2e-3)


class _LinearActSpec(OperatorSpec):
    """An OperatorSpec whose Definitions each carry the reference with their own activation:
    the line ``ACTIVATION = "..."`` of reference.py is rewritten from the variant's params."""

    def _definition(self, variant: Variant, reference: str) -> Definition:
        activation = variant.params["activation"]
        text, count = re.subn(
            r'^ACTIVATION = "[a-z_]+"$', f'ACTIVATION = "{activation}"', reference, flags=re.M
        )
        if count != 1:
            raise ValueError(
                f"{self.folder / self.reference}: needs one line 'ACTIVATION = \"...\"'"
            )
        return super()._definition(variant, text)


_SMOKE = [(17, 48, 64)]
# Odd sizes for the interpreter: one row, rows not a multiple of any tile, an output row of 130
# elements (260 bytes: no TMA store), a reduction of 96 (not a multiple of 64), an empty batch.
_CORRECTNESS = [(1, 48, 64), (33, 130, 96), (0, 48, 64), (17, 130, 64)]
# Too big for the interpreter: GPU correctness at odd sizes, then the benchmark shapes.
_CORRECTNESS_LARGE = [(1, 1000, 1024), (17, 1030, 1000), (1000, 1001, 1001)]
_PERFORMANCE = [(8192, 8192, 8192), (4096, 14336, 4096)]


def _axes(m: int, n: int, k: int) -> dict[str, int]:
    return {"m": m, "n": n, "k": k}


def _workloads() -> tuple[WorkloadSpec, ...]:
    made = [WorkloadSpec(_axes(*s), tags=("smoke", "correctness")) for s in _SMOKE]
    made += [WorkloadSpec(_axes(*s), tags=("correctness",)) for s in _CORRECTNESS]
    # Strided rows: 272-byte rows (TMA can still read them) and 150-byte rows (it cannot).
    made.append(WorkloadSpec(_axes(9, 48, 64), tags=("correctness",), params={"x_row_stride": 136}))
    made.append(WorkloadSpec(_axes(9, 48, 64), tags=("correctness",), params={"x_row_stride": 75}))
    made.append(
        WorkloadSpec(_axes(17, 48, 64), tags=("correctness",), params={"input_scale": 16.0})
    )
    made += [WorkloadSpec(_axes(*s), tags=("correctness", "large")) for s in _CORRECTNESS_LARGE]
    made += [WorkloadSpec(_axes(*s), tags=("performance", "large")) for s in _PERFORMANCE]
    return tuple(made)


def _solutions() -> tuple[SolutionSpec, ...]:
    made: list[SolutionSpec] = []
    for activation in ACTIVATIONS:
        variants = tuple(f"{activation}_{suffix}" for suffix in DTYPES)
        made += [
            SolutionSpec(
                "triton",
                "triton",
                f"triton/linear_act.py::run_{activation}",
                targets=("cuda", "cpu"),
                shared=("persistent_matmul.py",),
                variants=variants,
                description="Persistent matmul, TMA descriptors on Hopper, grouped tile order, "
                "bias and activation in the fp32 epilogue.",
            ),
            SolutionSpec(
                "torch_eager",
                "python",
                f"torch/eager.py::run_{activation}",
                targets=("cuda", "cpu"),
                variants=variants,
                description="torch eager: addmm (cuBLASLt with the bias epilogue), then the "
                "activation in place.",
            ),
            SolutionSpec(
                "torch_compile",
                "python",
                f"torch/compile.py::run_{activation}",
                targets=("cuda",),
                variants=variants,
                destination_passing_style=False,
                description="torch.compile (Inductor, default mode, static shapes) of F.linear "
                "then the activation.",
            ),
        ]
        if activation in CUBLASLT_ACTIVATIONS:
            made.append(
                SolutionSpec(
                    "cuda",
                    "cuda",
                    f"cuda/linear_act_cublaslt.cu::run_{activation}",
                    targets=("sm_90a",),
                    variants=variants,
                    description="cuBLASLt with the bias and activation in its epilogue, loaded "
                    "at run time; one workspace per device per process.",
                )
            )
    return tuple(made)


def _variants() -> tuple[Variant, ...]:
    return tuple(
        Variant(
            f"{activation}_{suffix}",
            {"dtype": dtype, "activation": activation},
            {"out": _tolerance(activation, suffix)},
            description=f"out = {activation}(x @ weight^T + bias) in {dtype}, fp32 accumulation.",
        )
        for activation in ACTIVATIONS
        for suffix, dtype in DTYPES.items()
    )


_INPUTS: dict[str, Any] = {
    "x": tensor(["m", "k"], "{dtype}", "activations; rows may be strided"),
    "weight": tensor(["n", "k"], "{dtype}", "nn.Linear layout: one row per output feature"),
    "bias": tensor(["n"], "{dtype}"),
}

OPERATOR = _LinearActSpec(
    name="linear",
    op_type="linear_act",
    description="out = act(x @ weight^T + bias), fp32 accumulation, rounded once.",
    folder=Path(__file__).parent,
    axes={
        "m": var("rows of x (0 included)"),
        "n": var("output features"),
        "k": var("input features"),
    },
    inputs=_INPUTS,
    outputs={"out": tensor(["m", "n"], "{dtype}")},
    bytes_moved="nbytes('x') + nbytes('weight') + nbytes('bias') + nbytes('out')",
    flops="2 * m * n * k",
    tags=("linear_act", "gemm", "fused_epilogue"),
    variants=_variants(),
    workloads=_workloads(),
    solutions=_solutions(),
)
