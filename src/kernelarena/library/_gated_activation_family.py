"""What the gated activations (silu_and_mul, gelu_and_mul, gelu_tanh_and_mul) declare alike.

Conventions (vLLM's and FlashInfer's): x is [rows, 2 d] with the gate in the first half and the
up projection in the second; out = act(gate) * up is [rows, d], computed in float32 and rounded
once. The axes are ``rows``, ``two_d`` (the input width, what benchmarks call the hidden size) and
``d = two_d // 2``, derived, with ``two_d`` even as a constraint; the free axes are those of the
input, so arguments bind every axis from x alone. Bytes moved: rows * 2 d read, rows * d written.

Each operator's ``__init__.py`` keeps what is its own: the activation, its flop count, the gate
range that overflows its exponentials, and the words that describe its kernels.
"""

from __future__ import annotations

import functools
from pathlib import Path

from kernelarena.data import Tolerance
from kernelarena.library._spec import (
    OperatorSpec,
    SolutionSpec,
    Variant,
    WorkloadSpec,
    derived,
    tensor,
    triton_and_cuda,
    var,
)

# (rows, two_d): two_d is the input width, d = two_d // 2 the output width.
_SHAPES_SMOKE = [(1, 256), (7, 2000)]
_SHAPES_CORRECTNESS = [(0, 8192), (1, 2), (3, 10240), (33, 16384), (5, 32768), (2, 2002)]
_SHAPES_PERFORMANCE = [(128, 4096), (4096, 4096), (32768, 8192)]

# The kernels compute act(gate) * up in float32 and round once. fp32: the fast exp and division
# of each activation stay below 3e-6 relative (each operator's spec says how). fp16 and bf16: the
# final rounding, half an ulp (2^-12 and 2^-9 relative); peers that round act(gate) before the
# product (torch eager, Liger) reach twice that, still inside.
_TOLERANCES = {
    "fp32": Tolerance(atol=1e-5, rtol=1e-5),
    "fp16": Tolerance(atol=1e-3, rtol=1e-3),
    "bf16": Tolerance(atol=1e-2, rtol=1e-2),
}
_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}

# The solutions embed the gated activations' templates and the tiles and tuner (library/_shared/).
TRITON_SHARED = ("gated_activation.py", "tiles.py", "tuning.py")
CUDA_SHARED = ("device.cuh", "gated_activation.cuh", "rows_elementwise.cuh", "vector_io.cuh")


def _workloads(gate_range: float) -> tuple[WorkloadSpec, ...]:
    def shapes(listed: list[tuple[int, int]], tags: tuple[str, ...]) -> list[WorkloadSpec]:
        return [WorkloadSpec({"rows": r, "two_d": w}, tags=tags) for r, w in listed]

    return (
        *shapes(_SHAPES_SMOKE, ("smoke", "correctness")),
        *shapes(_SHAPES_CORRECTNESS, ("correctness",)),
        WorkloadSpec(
            {"rows": 9, "two_d": 2000}, tags=("correctness",), params={"row_stride": 3072}
        ),
        WorkloadSpec(
            {"rows": 4, "two_d": 512}, tags=("correctness",), params={"gate_range": gate_range}
        ),
        # A million rows, past CUDA's gridDim.y (65535): the kernels loop over rows.
        WorkloadSpec(
            {"rows": 1_000_000, "two_d": 272}, tags=("correctness", "large"), variants=("bf16",)
        ),
        *shapes(_SHAPES_PERFORMANCE, ("performance",)),
    )


def operator(
    *,
    name: str,
    activation: str,
    folder: Path,
    flops: str,
    gate_range: float,
    solutions: tuple[SolutionSpec, ...],
    reference: str = "reference.py",
) -> OperatorSpec:
    """The OperatorSpec of out = ``activation``(gate) * up. ``gate_range``: a correctness
    workload draws the gate in [-R, R] with R large enough that the activation's exponentials
    overflow and vanish (see the reference's make_inputs)."""
    return OperatorSpec(
        name=name,
        op_type="activation",
        description=f"out = {activation}(x[:, :d]) * x[:, d:] (gate first), in float32, "
        "rounded once.",
        folder=folder,
        reference=reference,
        axes={
            "rows": var("rows of x (any count, 0 included)"),
            "two_d": var("width of x: the gate half then the up half"),
            "d": derived("two_d // 2", "width of out"),
        },
        constraints=("two_d % 2 == 0",),
        inputs={"x": tensor(["rows", "two_d"], "{dtype}", "gate | up; rows may be strided")},
        outputs={"out": tensor(["rows", "d"], "{dtype}")},
        bytes_moved="nbytes('x') + nbytes('out')",
        flops=flops,
        variants=tuple(
            Variant(s, {"dtype": _DTYPES[s]}, {"out": t}) for s, t in _TOLERANCES.items()
        ),
        workloads=_workloads(gate_range),
        solutions=solutions,
    )


# The gated activations' Triton (``triton/<name>.py``, CPU too) and CUDA (``cuda/<name>.cu``,
# sm_90a) kernels: ``kernels(name, symbol, triton_description, cuda_description)``, embedding the
# shared files above.
kernels = functools.partial(triton_and_cuda, triton_shared=TRITON_SHARED, cuda_shared=CUDA_SHARED)


def torch_peers(symbol: str, eager_description: str) -> tuple[SolutionSpec, SolutionSpec]:
    """torch eager (into out; CPU too) and torch.compile, entry ``symbol`` in torch/eager.py and
    torch/compiled.py."""
    return (
        SolutionSpec(
            "torch_eager",
            "python",
            f"torch/eager.py::{symbol}",
            targets=("cuda", "cpu"),
            description=eager_description,
        ),
        SolutionSpec(
            "torch_compile",
            "python",
            f"torch/compiled.py::{symbol}",
            targets=("cuda",),
            destination_passing_style=False,
            description="torch.compile (Inductor, static shapes): one fused kernel.",
        ),
    )


def liger_peer(symbol: str, liger_function: str) -> SolutionSpec:
    """Liger-Kernel's ``liger_function`` on the two halves (``torch/liger.py::<symbol>``)."""
    return SolutionSpec(
        "liger",
        "python",
        f"torch/liger.py::{symbol}",
        targets=("cuda",),
        destination_passing_style=False,
        dependencies=("liger-kernel",),
        description=f"Liger-Kernel {liger_function} on the two halves (copied contiguous).",
    )
