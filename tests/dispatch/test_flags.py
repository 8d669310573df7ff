"""Boolean scalar inputs (attention's ``causal``) are part of the key: workloads that differ only in
such a flag are separate keys with winners of their own, and calls route by the flag's value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from typer.testing import CliRunner

import kernelarena
from kernelarena.cli import app
from kernelarena.data import BuildSpec, Definition, RandomInput, ScalarInput, Solution, SourceFile
from kernelarena.data import Workload as WorkloadModel
from kernelarena.dispatch.store import load_or_build
from tests.dispatch.toys import CPU, add, timed, toy_set

MASKED = Definition.model_validate(
    {
        "name": "masked_toy_fp32",
        "op_type": "masked_toy",
        "axes": {"rows": {"type": "var"}, "cols": {"type": "var"}},
        "inputs": {
            "x": {"shape": ["rows", "cols"], "dtype": "float32"},
            "factor": {"shape": None, "dtype": "float32"},
            "masked": {"shape": None, "dtype": "bool"},
        },
        "outputs": {"out": {"shape": ["rows", "cols"], "dtype": "float32"}},
        "reference": "def run(x, factor, masked):\n    return x * factor if masked else x\n",
    }
)


def flag_marker(value: int) -> Solution:
    return Solution(
        name=f"masked_toy_fp32_m{value}",
        definition=MASKED.name,
        author="tests",
        spec=BuildSpec(language="python", target_hardware=["cpu"], entry_point="m.py::run"),
        sources=[
            SourceFile(
                path="m.py", content=f"def run(x, factor, masked, out):\n    out.fill_({value})\n"
            )
        ],
    )


ONE, TWO = flag_marker(1), flag_marker(2)


def flagged(masked: bool, rows: int = 4, cols: int = 64) -> WorkloadModel:
    return WorkloadModel(
        axes={"rows": rows, "cols": cols},
        inputs={
            "x": RandomInput(),
            "factor": ScalarInput(value=2.0),
            "masked": ScalarInput(value=masked),
        },
        uuid=f"masked-{rows}-{cols}-{masked}",
    )


def measured() -> Any:
    """At 4 x 64: ONE wins with the mask, TWO without."""
    trace_set = toy_set(MASKED, solutions=[ONE, TWO])
    on, off = flagged(True), flagged(False)
    add(trace_set, timed(MASKED, ONE, on, 2.0), timed(MASKED, TWO, on, 9.0))
    add(trace_set, timed(MASKED, ONE, off, 9.0), timed(MASKED, TWO, off, 2.0))
    return trace_set


@kernelarena.apply("masked_toy")
def masked_toy(x: torch.Tensor, factor: float, masked: bool) -> torch.Tensor:
    return torch.full_like(x, -1)


def test_workloads_differing_in_a_flag_are_separate_keys() -> None:
    table = load_or_build(MASKED, measured(), CPU, "cpu")
    assert table.flags == ["masked"]
    assert [(e.key, e.winner) for e in table.entries] == [
        ((4, 64, 0), TWO.name),
        ((4, 64, 1), ONE.name),
    ]
    near = table.choose((5, 100, 1))  # nearest by the axes, with the same flag only
    assert (near.reason, near.measured_key, near.solutions[0]) == ("nearest", (4, 64, 1), ONE.name)
    only_off = toy_set(MASKED, solutions=[ONE, TWO])
    add(only_off, timed(MASKED, ONE, flagged(False), 9.0), timed(MASKED, TWO, flagged(False), 2.0))
    unmeasured = load_or_build(MASKED, only_off, CPU, "cpu").choose((4, 64, 1))
    assert unmeasured.reason == "definition_best"  # never the other flag's key as "nearest"


def test_calls_route_by_the_flag_also_on_the_fast_path() -> None:
    kernelarena.enable_apply(measured())
    x = torch.randn(4, 64)
    for _ in range(3):  # the first call of each key resolves it, the later ones look it up
        assert masked_toy(x, 2.0, True).eq(1).all()
        assert masked_toy(x, 2.0, False).eq(2).all()


def test_dispatch_show_names_the_flag(tmp_path: Path) -> None:
    measured().save(tmp_path / "dataset")
    result = CliRunner().invoke(
        app,
        ["dispatch", "show", MASKED.name, "--dataset", str(tmp_path / "dataset")],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "masked=1" in result.output and "masked=0" in result.output
