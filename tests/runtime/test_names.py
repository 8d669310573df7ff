"""runtime.names: one resolver of definition names for the command line, the runner and apply."""

from __future__ import annotations

import pytest

from kernelarena.data import Definition, TraceSet
from kernelarena.evaluate.executors.runner import PlanError, select_definitions
from kernelarena.runtime.names import UnknownNames, definitions_named


def definition(name: str, op_type: str, family: str) -> Definition:
    return Definition.model_validate(
        {
            "name": name,
            "op_type": op_type,
            "tags": [f"family:{family}"],
            "axes": {"n": {"type": "var"}},
            "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
            "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
            "reference": "def run(x):\n    return x\n",
        }
    )


@pytest.fixture
def trace_set() -> TraceSet:
    made = TraceSet()
    for d in (
        definition("rmsnorm_fp32", "norm", "rmsnorm"),
        definition("rmsnorm_bf16", "norm", "rmsnorm"),
        definition("layernorm_fp32", "norm", "layernorm"),
        # A definition named like another family: its own name wins.
        definition("scale", "elementwise", "layernorm"),
        definition("scale_fp16", "elementwise", "scale"),
    ):
        made.definitions[d.name] = d
    return made


def named(trace_set: TraceSet, names: str | list[str] | None) -> list[str]:
    return [d.name for d in definitions_named(trace_set, names)]


def test_a_name_is_a_definition_else_a_family_or_op_type(trace_set: TraceSet) -> None:
    assert named(trace_set, "rmsnorm_bf16") == ["rmsnorm_bf16"]
    assert named(trace_set, "rmsnorm") == ["rmsnorm_fp32", "rmsnorm_bf16"]
    assert named(trace_set, "norm") == ["rmsnorm_fp32", "rmsnorm_bf16", "layernorm_fp32"]
    assert named(trace_set, "scale") == ["scale"]  # not the family 'scale' of scale_fp16


def test_a_list_chooses_what_each_name_does_once(trace_set: TraceSet) -> None:
    assert named(trace_set, ["rmsnorm", "rmsnorm_fp32", "layernorm_fp32"]) == [
        "rmsnorm_fp32",
        "rmsnorm_bf16",
        "layernorm_fp32",
    ]
    assert named(trace_set, None) == named(trace_set, []) == list(trace_set.definitions)


def test_every_unknown_name_is_named(trace_set: TraceSet) -> None:
    with pytest.raises(UnknownNames) as raised:
        definitions_named(trace_set, ["rmsnorm", "rmsnrom", "gelu"])
    assert raised.value.names == ["rmsnrom", "gelu"]
    assert str(raised.value).startswith("'rmsnrom', 'gelu' match no definition, family or op_type")
    assert "known definitions: layernorm_fp32, rmsnorm_bf16" in str(raised.value)
    with pytest.raises(UnknownNames, match="'rmsnrom' matches no definition"):
        definitions_named(trace_set, "rmsnrom")


def test_the_runner_resolves_the_same_way(trace_set: TraceSet) -> None:
    assert [d.name for d in select_definitions(trace_set, ["rmsnorm"])] == named(
        trace_set, "rmsnorm"
    )
    with pytest.raises(PlanError, match="'rmsnrom' matches no definition"):
        select_definitions(trace_set, ["rmsnorm", "rmsnrom"])
