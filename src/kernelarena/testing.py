"""Helpers for tests of built-in operators: find a library solution, build it, compare results."""

from __future__ import annotations

from typing import Any

import torch

from kernelarena.build import Runnable, build_solution
from kernelarena.data import Definition, Solution
from kernelarena.library import load_library


def library_definition(name: str) -> Definition:
    return load_library().definitions[name]


def library_solution(definition: str, suffix: str) -> Solution:
    """The solution of ``definition`` named ``<definition>_<suffix>`` (e.g. 'scale_bf16', 'triton')."""
    return load_library().solutions[f"{definition}_{suffix}"]


def build(definition: str, suffix: str, device: str = "cpu") -> Runnable:
    """Build a library solution; for CUDA solutions on a machine without a GPU this compiles for
    sm_90a and loads the module (calling it needs a GPU)."""
    return build_solution(
        library_definition(definition), library_solution(definition, suffix), device
    )


def reference(definition: str) -> Any:
    """The definition's reference module (``run`` and optional ``make_inputs``)."""
    namespace: dict[str, Any] = {}
    exec(
        compile(library_definition(definition).reference, f"<reference {definition}>", "exec"),
        namespace,
    )
    return namespace


def assert_close(
    actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, name: str = "out"
) -> None:
    """Elementwise |actual - expected| <= atol + rtol |expected| in float64, NaN never passing;
    the message names the first mismatching indices."""
    assert actual.shape == expected.shape, (
        f"{name}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    )
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    bad = ~((a - e).abs() <= atol + rtol * e.abs())
    bad &= ~(torch.isinf(e) & (a == e))
    if bool(bad.any()):
        indices = bad.nonzero()[:5].tolist()
        worst = (a - e).abs().nan_to_num(float("inf")).max().item()
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {bad.numel()} elements outside atol={atol} rtol={rtol}; "
            f"max abs error {worst:.3g}; first at {indices}: got {[a[tuple(i)].item() for i in indices]}, "
            f"expected {[e[tuple(i)].item() for i in indices]}"
        )
