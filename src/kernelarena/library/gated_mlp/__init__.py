"""gated_mlp: out = silu(x @ w_gate^T) * (x @ w_up^T), the gated MLP's first half, in one kernel.

Both projections share the loads of x and accumulate side by side in fp32; the epilogue applies
silu to the gate, multiplies by up and rounds once. Weights are in nn.Linear layout ([n, k], one row
per intermediate feature); no bias, as in LLaMA-style MLPs.
"""

from pathlib import Path

from kernelarena.data import Tolerance
from kernelarena.library._spec import (
    OperatorSpec,
    SolutionSpec,
    Variant,
    WorkloadSpec,
    tensor,
    var,
)

_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
# The fused kernel matches the reference up to one output ulp (fp32 accumulation-order differences
# straddling a rounding boundary: 2^-8..2^-7 relative in bf16, 2^-10 in fp16) plus silu's
# approximate exp2 (2^-22 relative). The torch peers round gate, up, silu(gate) and the product
# to the output dtype: up to four half-ulp roundings, silu amplifying its input's error by up to
# 2x for negative gates, so fp16 allows 4e-3 relative (about four fp16 ulps).
_TOLERANCES = {
    "fp16": Tolerance(atol=2e-3, rtol=4e-3),
    "bf16": Tolerance(atol=1e-2, rtol=2e-2),
}


def _axes(m: int, n: int, k: int) -> dict[str, int]:
    return {"m": m, "n": n, "k": k}


_SMOKE = [(17, 48, 64)]
_CORRECTNESS = [(1, 48, 64), (33, 130, 96), (0, 48, 64)]
_CORRECTNESS_LARGE = [(1, 1000, 1024), (1000, 1001, 1001)]
_PERFORMANCE = [(4096, 14336, 4096)]

OPERATOR = OperatorSpec(
    name="gated_mlp",
    op_type="gated_mlp",
    description="out = silu(x @ w_gate^T) * (x @ w_up^T), fp32 accumulation, rounded once.",
    folder=Path(__file__).parent,
    axes={
        "m": var("rows of x (0 included)"),
        "n": var("intermediate features"),
        "k": var("hidden size"),
    },
    inputs={
        "x": tensor(["m", "k"], "{dtype}", "activations; rows may be strided"),
        "w_gate": tensor(["n", "k"], "{dtype}", "gate projection, nn.Linear layout"),
        "w_up": tensor(["n", "k"], "{dtype}", "up projection, nn.Linear layout"),
    },
    outputs={"out": tensor(["m", "n"], "{dtype}")},
    bytes_moved="nbytes('x') + nbytes('w_gate') + nbytes('w_up') + nbytes('out')",
    flops="4 * m * n * k",
    tags=("linear_act", "gemm", "fused_epilogue"),
    variants=tuple(
        Variant(suffix, {"dtype": dtype}, {"out": _TOLERANCES[suffix]})
        for suffix, dtype in _DTYPES.items()
    ),
    workloads=(
        *(WorkloadSpec(_axes(*s), tags=("smoke", "correctness")) for s in _SMOKE),
        *(WorkloadSpec(_axes(*s), tags=("correctness",)) for s in _CORRECTNESS),
        WorkloadSpec(_axes(9, 48, 64), tags=("correctness",), params={"x_row_stride": 136}),
        WorkloadSpec(_axes(17, 48, 64), tags=("correctness",), params={"input_scale": 16.0}),
        *(WorkloadSpec(_axes(*s), tags=("correctness", "large")) for s in _CORRECTNESS_LARGE),
        *(WorkloadSpec(_axes(*s), tags=("performance", "large")) for s in _PERFORMANCE),
    ),
    solutions=(
        SolutionSpec(
            "triton",
            "triton",
            "triton/gated_mlp.py::run",
            targets=("cuda", "cpu"),
            shared=("persistent_matmul.py",),
            description="Persistent matmul with two fp32 accumulators (gate, up) sharing the x "
            "tiles; TMA on Hopper; silu(gate) * up in the epilogue.",
        ),
        SolutionSpec(
            "torch_eager",
            "python",
            "torch/eager.py::run",
            targets=("cuda", "cpu"),
            description="torch eager: two F.linear, silu, multiply into out.",
        ),
        SolutionSpec(
            "torch_compile",
            "python",
            "torch/compile.py::run",
            targets=("cuda",),
            destination_passing_style=False,
            description="torch.compile (Inductor, default mode, static shapes) of the two-matmul form.",
        ),
    ),
)
