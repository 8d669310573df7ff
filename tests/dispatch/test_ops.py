"""Generated operators: every built-in one on a CPU through apply, the schema, torch.compile
(fullgraph, aot_eager backend: it runs the fake implementations and the real ones without
Inductor's C++ compile, which would take most of this folder's time budget on two cores)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import torch

import kernelarena
import kernelarena.ops as ops
from kernelarena.dispatch.ops import make_operator, operator_groups, schema
from kernelarena.evaluate.inputs import generate_inputs, load_reference, seed_for
from kernelarena.library import load_library
from kernelarena.testing import assert_close
from tests.dispatch.toys import inplace_definition, inplace_solution, toy_set

LIBRARY = load_library()


def _smoke_call(name: str) -> tuple[Any, list[Any], Any]:
    """(definition, inputs of its first smoke workload, the reference's outputs)."""
    definition = ops.OPERATORS[name].definitions[0]  # type: ignore[attr-defined]
    definition = LIBRARY.definitions[definition]
    load = next(w for w in LIBRARY.workloads_for(definition.name, ["smoke"]))
    axes = definition.resolve_axes(load.axes)
    reference = load_reference(definition)
    inputs = generate_inputs(
        definition,
        load,
        axes,
        torch.device("cpu"),
        seed_for(load, "ops"),
        reference.get("make_inputs"),
    )
    arguments = [inputs[n] for n in definition.inputs]
    clones = [a.clone() if isinstance(a, torch.Tensor) else a for a in arguments]
    return definition, arguments, reference["run"](*clones)


@pytest.mark.parametrize("enabled", [False, True], ids=["apply-off", "apply-on"])
def test_every_builtin_operator_runs_on_a_cpu(enabled: bool, tmp_path: Path) -> None:
    assert ops.PROBLEMS == []
    if enabled:
        kernelarena.enable_apply(tmp_path / "empty")  # the library, no CPU traces: the defaults
    for name in ops.OPERATORS:
        definition, arguments, expected = _smoke_call(name)
        produced = ops.OPERATORS[name](*arguments)
        produced = produced if isinstance(produced, tuple) else (produced,)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for (output, _), got, want in zip(definition.outputs.items(), produced, expected):
            tolerance = definition.tolerance_for(output)
            assert_close(got, want, tolerance.atol, tolerance.rtol, f"{name}.{output}")


def test_family_operators_and_their_schemas() -> None:
    groups = operator_groups(LIBRARY.definitions.values())
    assert [d.name for d in groups["rmsnorm"]] == ["rmsnorm_fp32", "rmsnorm_fp16", "rmsnorm_bf16"]
    assert (
        schema(LIBRARY.definitions["rmsnorm_fp32"])
        == "(Tensor x, Tensor weight, float eps) -> Tensor"
    )
    if "linear_silu_fp16" in LIBRARY.definitions:  # one family, one dtype, several activations
        assert {d.name for d in groups["linear_silu"]} == {"linear_silu_fp16", "linear_silu_bf16"}
    assert schema(inplace_definition()) == "(Tensor x, Tensor(a1!) acc) -> Tensor"
    x = torch.randn(3, 16, dtype=torch.bfloat16)
    assert ops.scale(x, 2.0).dtype == torch.bfloat16  # scale_bf16, by the dtype of x
    assert torch.equal(torch.ops.kernelarena.scale(x, 2.0), ops.scale(x, 2.0))
    site = ops.scale.__kernelarena_site__  # type: ignore[attr-defined]
    assert site.lookup((x, 2.0))[0] is not None  # the operator's own call site, the key now known


def test_torch_compile_fullgraph_over_operators() -> None:
    def block(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        normed = ops.rmsnorm(x, weight, 1e-6)
        return ops.silu_and_mul(torch.cat([normed, normed * 2], dim=-1)) + 1

    compiled = torch.compile(block, fullgraph=True, backend="aot_eager", dynamic=True)
    for rows in (3, 5):  # dynamic: the fake derives d = two_d // 2 on symbolic sizes
        x, weight = torch.randn(rows, 32), torch.randn(32)
        assert_close(compiled(x, weight), block(x, weight), 1e-6, 1e-6)
    graphs: list[str] = []

    def record(graph: torch.fx.GraphModule, example: Any) -> Any:
        graphs.append(str(graph.graph))
        return graph.forward

    torch.compile(block, fullgraph=True, backend=record)(torch.randn(3, 32), torch.randn(32))
    assert "kernelarena.rmsnorm" in graphs[0] and "kernelarena.silu_and_mul" in graphs[0]


def test_in_place_operator_mutates_its_input_eagerly_and_compiled() -> None:
    definition = inplace_definition()
    trace_set = toy_set(definition, solutions=[inplace_solution(definition)])
    kernelarena.enable_apply(trace_set)
    accumulate = make_operator("accumulate", [definition], namespace="kernelarena_test")
    acc = torch.ones(4)
    out, acc_out = accumulate(torch.full((4,), 2.0), acc)
    assert acc_out is acc and acc.eq(3).all() and out.eq(6).all()

    def twice(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        out, _ = accumulate(x, acc)
        return out + accumulate(x, acc)[0]

    acc = torch.zeros(4)
    result = torch.compile(twice, fullgraph=True, backend="aot_eager")(torch.ones(4), acc)
    assert acc.eq(2).all() and result.eq(2 + 4).all()


def test_repeat_calls_keyword_calls_and_a_new_runtime_give_the_same_result(
    tmp_path: Path,
) -> None:
    """The operator's fast path (a key seen before) against the slow one: keywords, a shape not
    seen yet, and apply turned off and on again in between (each resets the call sites)."""
    definition, (x, weight, eps), expected = _smoke_call("rmsnorm")
    tolerance = definition.tolerance_for("out")
    rows = torch.randn(3, x.shape[-1], dtype=x.dtype)
    for step in range(3):
        if step == 1:
            kernelarena.disable_apply()
        if step == 2:
            kernelarena.enable_apply(tmp_path / "empty")
        for _ in range(2):  # the second call of a key takes the fast path
            assert_close(ops.rmsnorm(x, weight, eps), expected, tolerance.atol, tolerance.rtol)
        by_keyword = ops.rmsnorm(x, weight=weight, eps=eps)
        assert_close(by_keyword, expected, tolerance.atol, tolerance.rtol)
        reference = load_reference(definition)["run"](rows.clone(), weight.clone(), eps)
        assert_close(ops.rmsnorm(rows, weight, eps), reference, tolerance.atol, tolerance.rtol)


def test_torch_export_takes_the_custom_op_too() -> None:
    """``torch.export`` without Dynamo (non-strict, its default) runs the operator's Python with
    torch.compiler's compiling flag set: the operator must see it and call the custom op, never
    the eager call site (with fake tensors). Strict export is Dynamo's, tested above."""

    class Norm(torch.nn.Module):
        def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
            return ops.rmsnorm(x, weight, 1e-6)

    x, weight = torch.randn(3, 32), torch.randn(32)
    exported = torch.export.export(Norm(), (x, weight), strict=False)
    called = [n.target for n in exported.graph.nodes if n.op == "call_function"]
    assert called == [torch.ops.kernelarena.rmsnorm.default]
    assert_close(exported.module()(x, weight), Norm()(x, weight), 1e-6, 1e-6)


def test_operators_take_their_inputs_by_name() -> None:
    x, weight = torch.randn(3, 32), torch.randn(32)
    expected = ops.rmsnorm(x, weight, 1e-6)
    assert torch.equal(ops.rmsnorm(x, weight=weight, eps=1e-6), expected)
    assert torch.equal(ops.rmsnorm(eps=1e-6, x=x, weight=weight), expected)
    assert list(inspect.signature(ops.rmsnorm).parameters) == ["x", "weight", "eps"]
