"""Helpers for tests of built-in operators: find a library solution, build it, compare results."""

from __future__ import annotations

from typing import Any

import torch

from kernelarena.compile import Runnable, build_solution
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


def check_every_workload(definition_name: str, suffix: str, device: str = "cuda") -> int:
    """Build the library solution ``<definition>_<suffix>`` and compare it with the reference on
    every workload of the definition (the engine's inputs, outputs filled with NaN first, the
    definition's tolerances); returns how many workloads were checked."""
    from kernelarena.runtime.compare import compare
    from kernelarena.runtime.inputs import allocate_outputs, generate_inputs, load_reference

    definition = library_definition(definition_name)
    runnable = build(definition_name, suffix, device)
    namespace = load_reference(definition)
    workloads = load_library().workloads.get(definition_name, [])
    target = torch.device(device)
    for workload in workloads:
        axes = definition.resolve_axes(workload.axes)
        inputs = generate_inputs(
            definition, workload, axes, target, 7, namespace.get("make_inputs")
        )
        arguments = [inputs[n] for n in definition.inputs]
        outputs = allocate_outputs(definition, axes, target)
        for tensor in outputs.values():
            if tensor.is_floating_point():
                tensor.fill_(float("nan"))
        runnable(*arguments, *outputs.values())
        expected = namespace["run"](*arguments)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for (output, produced), wanted in zip(outputs.items(), expected, strict=True):
            spec = definition.outputs[output]
            result = compare(output, produced, wanted, spec.dtype, definition.tolerance_for(output))
            assert result.ok, f"{definition_name} {workload.axes}: {result.describe()}"
    return len(workloads)
