"""Ahead-of-time builds: the winners of every table land in the build cache before the first call.

CUDA winners compile for sm_90a here without a GPU too, but a compile takes tens of seconds on two
cores, so these tests build Python winners; docs/apply.md shows the CUDA run.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kernelarena.cli import app
from kernelarena.dispatch.aot import build_winners
from kernelarena.evaluate.sandbox.confined_build import build_in_sandbox
from tests.dispatch.toys import (
    CPU,
    OTHER_GPU,
    add,
    marker,
    timed,
    toy_definition,
    toy_set,
    workload,
)

TOY = toy_definition()
ONE, TWO, THREE = (marker(TOY, v) for v in (1, 2, 3))


def measured_set():  # type: ignore[no-untyped-def]
    trace_set = toy_set(TOY, solutions=[ONE, TWO, THREE])
    small, large = workload(TOY, rows=4, cols=8), workload(TOY, rows=4096, cols=8)
    add(trace_set, timed(TOY, ONE, small, 1.0), timed(TOY, TWO, small, 5.0))
    add(trace_set, timed(TOY, TWO, large, 1.0), timed(TOY, THREE, large, 9.0))
    add(trace_set, timed(TOY, THREE, small, 0.5, hardware=OTHER_GPU))
    return trace_set


def test_winners_of_every_measured_hardware_are_built(cache: Path) -> None:
    results = build_winners(measured_set(), [TOY], device="cpu", confined=build_in_sandbox)
    built = {(b.hardware == OTHER_GPU, b.solution, b.status) for b in results}
    assert built == {
        (False, ONE.name, "built"),
        (False, TWO.name, "built"),
        (True, THREE.name, "built"),  # the other GPU's winner: its sources ready in the cache
    }
    assert all(Path(b.detail).is_relative_to(cache / "build") for b in results)
    everything = build_winners(
        measured_set(),
        [TOY],
        [OTHER_GPU],
        only_winners=False,
        device="cpu",
        confined=build_in_sandbox,
    )
    assert sorted(b.solution for b in everything) == sorted([ONE.name, TWO.name, THREE.name])


def test_without_a_confined_builder_nothing_from_outside_the_library_is_built(cache: Path) -> None:
    results = build_winners(measured_set(), [TOY], device="cpu")
    assert {b.status for b in results} == {"skipped"}
    assert all("outside the library" in b.detail for b in results)


def test_build_winners_command(tmp_path: Path) -> None:
    measured_set().save(tmp_path / "dataset")
    result = CliRunner().invoke(
        app,
        ["build", "--winners", "toy", "--hardware", CPU, "--dataset", str(tmp_path / "dataset")],
    )
    assert result.exit_code == 0, result.output
    assert "m1" in result.output and "built" in result.output and "0 failed" in result.output


def test_warming_runs_no_make_inputs_but_the_library_s(tmp_path: Path) -> None:
    """A winner is warmed on inputs drawn here, in the command's own process: a definition's
    make_inputs is the dataset's code, which runs only in a sandbox, so one that is not the
    library's own leaves the winner unwarmed, and does not run."""
    import types

    import torch

    from kernelarena.dispatch.aot import _call_once
    from kernelarena.library import load_library

    marker = tmp_path / "make_inputs-ran"
    library = load_library().definitions["scale_fp32"]
    planted = library.model_copy(
        update={
            "reference": library.reference
            + "\n\ndef make_inputs(axes, inputs, params, generator, device):\n"
            + f"    open({str(marker)!r}, 'w').close()\n    return inputs\n"
        }
    )
    trace = timed(TOY, ONE, workload(TOY, rows=4, cols=8), 1.0)
    runnable = types.SimpleNamespace(definition=planted)
    left_out = _call_once(runnable, trace, torch.device("cpu"), None)  # type: ignore[arg-type]
    assert left_out.startswith("not warmed"), left_out
    assert not marker.exists()
