"""What the row norms (rmsnorm, layernorm, fused_add_rmsnorm) declare alike.

Each norm reads rows of ``hidden`` elements, comes in float32, float16 and bfloat16, runs over the
same shapes (plus the numeric edge cases of its own formula) and ships the same kinds of solution:
a Triton and a CUDA kernel built on library/_shared/, and torch eager, torch.compile and Liger
peers. An operator's ``__init__.py`` keeps what is its own: formula, tensors, tolerances, edge
cases and the words that describe its kernels.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from kernelarena.data import Tolerance
from kernelarena.library._spec import (
    SolutionSpec,
    Variant,
    WorkloadSpec,
    tensor,
    triton_and_cuda,
    var,
)

AXES = {"rows": var("rows of x (any count, 0 included)"), "hidden": var("elements per row")}
X = tensor(["rows", "hidden"], "{dtype}", "input; rows may be strided")
WEIGHT = tensor(["hidden"], "{dtype}", "per-column scale, contiguous")
OUT = tensor(["rows", "hidden"], "{dtype}")

# The solutions embed the norms' launch plans, the tuner and the CUDA helpers (library/_shared/).
TRITON_SHARED = ("row_norm.py", "tuning.py")
CUDA_SHARED = ("device.cuh", "norm_rows.cuh", "reduce.cuh", "vector_io.cuh")

_DTYPES = (("fp32", "float32"), ("fp16", "float16"), ("bf16", "bfloat16"))
# out in 16 bits: every solution computes the reference's float32 value up to summation order and
# rsqrtf, so the rounded output is the reference's or one rounding step away: 2^-10 relative in
# float16, 2^-7 in bfloat16. (Each operator states its float32 tolerance and why.)
_OUT_16_BIT = {
    "fp16": Tolerance(atol=1e-3, rtol=1e-3),
    "bf16": Tolerance(atol=1e-2, rtol=1e-2),
}

_SMOKE = [(1, 128), (7, 1000)]
# 4097 and 1001: rows not a whole number of 16-byte vectors; 40000 (below): past the single-pass
# limit of the Triton solutions (a row no longer fits in one program's registers).
_CORRECTNESS = [(0, 4096), (1, 1), (3, 5120), (33, 8192), (5, 16384), (4, 4097), (6, 1001)]
_PERFORMANCE = [(128, 4096), (4096, 4096), (32768, 8192)]


def variants(
    fp32_out: Tolerance, others: Mapping[str, Tolerance] | None = None
) -> tuple[Variant, ...]:
    """One Variant per dtype: ``out`` within ``fp32_out`` in float32 and one rounding step in 16
    bits; ``others``, the other outputs' tolerances, the same in every dtype."""
    out = {"fp32": fp32_out, **_OUT_16_BIT}
    return tuple(
        Variant(suffix, {"dtype": dtype}, {"out": out[suffix], **(others or {})})
        for suffix, dtype in _DTYPES
    )


def edge_case(
    eps: float, params: Mapping[str, Any], dtypes: tuple[str, ...] | None = None
) -> WorkloadSpec:
    """A correctness workload of 6 rows of 2048 whose inputs ``params`` shape (see each
    reference's make_inputs) to test the arithmetic of one formula, in ``dtypes`` (all if None)."""
    return WorkloadSpec({"rows": 6, "hidden": 2048}, {"eps": eps}, ("correctness",), params, dtypes)


def workloads(eps: float, edge_cases: Sequence[WorkloadSpec]) -> tuple[WorkloadSpec, ...]:
    """Smoke and correctness shapes, strided rows, the operator's ``edge_cases``, a million rows
    (bfloat16 only) and the performance shapes."""
    scalars = {"eps": eps}

    def shape(rows: int, hidden: int, tags: tuple[str, ...], **params: int) -> WorkloadSpec:
        return WorkloadSpec({"rows": rows, "hidden": hidden}, scalars, tags, params)

    return (
        *(shape(r, h, ("smoke", "correctness")) for r, h in _SMOKE),
        *(shape(r, h, ("correctness",)) for r, h in _CORRECTNESS),
        shape(2, 40000, ("correctness",)),
        shape(9, 1000, ("correctness",), row_stride=1536),
        shape(5, 4096, ("correctness",), row_stride=4100),
        *edge_cases,
        WorkloadSpec(
            {"rows": 1_000_000, "hidden": 1000}, scalars, ("correctness", "large"), {}, ("bf16",)
        ),
        *(shape(r, h, ("performance",)) for r, h in _PERFORMANCE),
    )


# The norms' Triton (``triton/<name>.py``, CPU too) and CUDA (``cuda/<name>.cu``, sm_90a)
# kernels: ``kernels(name, symbol, triton_description, cuda_description)``, embedding the shared
# files above.
kernels = functools.partial(triton_and_cuda, triton_shared=TRITON_SHARED, cuda_shared=CUDA_SHARED)


def peers(eager_description: str, liger_description: str) -> tuple[SolutionSpec, ...]:
    """The out-of-place peers the kernels are measured against (``run`` in torch/): torch eager
    (CPU too), torch.compile of the float32 formula, and Liger-Kernel."""
    return (
        SolutionSpec(
            "torch_eager",
            "python",
            "torch/eager.py::run",
            targets=("cuda", "cpu"),
            description=eager_description,
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
            description=liger_description,
            dependencies=("liger-kernel",),
            destination_passing_style=False,
        ),
    )
