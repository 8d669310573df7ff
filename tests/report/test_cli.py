"""The command line: ``kernelarena report``, and what ``kernelarena run --dataset D`` runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelarena.cli import app
from kernelarena.cli.selection import dataset_selection
from kernelarena.data import TraceSet
from tests.evaluate.bad_solutions import trace_set as vector_scale_dataset
from tests.report.synthetic import H200, definition, toy_trace_set, workload

runner = CliRunner()


@pytest.fixture
def toy_dataset(tmp_path: Path) -> Path:
    folder = tmp_path / "toy"
    made = toy_trace_set()
    made.add_definition(definition("toy_untimed"), persist=False)
    made.save(folder)
    return folder


def _pages(path: Path) -> list[str]:
    return re.findall(r'<section class="page" id="([^"]+)"', path.read_text())


def test_report_of_a_dataset_is_about_its_own_definitions(
    toy_dataset: Path, tmp_path: Path
) -> None:
    output = tmp_path / "out" / "report.html"
    result = runner.invoke(app, ["report", "--dataset", str(toy_dataset), "-o", str(output)])
    assert result.exit_code == 0, result.output
    assert re.search(
        r"wrote .*report.html \(\d+\.\d MB\): 2 definitions, 2 hardware", result.output
    )
    assert _pages(output) == ["summary", "d-toy_broken", "d-toy_norm"]
    assert "toy_untimed (run kernelarena run NAME)" in output.read_text()  # listed, no page
    with_library = tmp_path / "with-library.html"
    named = runner.invoke(
        app,
        [
            "report",
            "rmsnorm_bf16",
            "toy_norm",
            "--dataset",
            str(toy_dataset),
            "-o",
            str(with_library),
        ],
    )
    assert named.exit_code == 0, named.output
    assert _pages(with_library) == ["summary", "d-rmsnorm_bf16", "d-toy_norm"]


def test_report_hardware_filter_and_errors(toy_dataset: Path, tmp_path: Path) -> None:
    output = tmp_path / "h200.html"
    dataset = ["--dataset", str(toy_dataset)]
    chosen = runner.invoke(app, ["report", *dataset, "--hardware", "h200", "-o", str(output)])
    assert chosen.exit_code == 0, chosen.output
    assert "1 hardware model(s)" in chosen.output and H200 in output.read_text()
    unknown = runner.invoke(app, ["report", *dataset, "--hardware", "A100", "-o", str(output)])
    assert unknown.exit_code == 2
    assert "--hardware 'A100' matches no hardware model" in unknown.output
    assert "NVIDIA H100 80GB HBM3, NVIDIA H200" in unknown.output
    untimed = runner.invoke(app, ["report", "toy_untimed", *dataset, "-o", str(output)])
    assert untimed.exit_code == 1 and "no traces of toy_untimed" in untimed.output
    bad_run = tmp_path / "bad.json"
    bad_run.write_text("{")
    bad = runner.invoke(app, ["report", *dataset, "--model-run", str(bad_run), "-o", str(output)])
    assert bad.exit_code == 2 and f"--model-run {bad_run}" in bad.output
    (tmp_path / "empty").mkdir()
    empty = runner.invoke(app, ["report", "--dataset", str(tmp_path / "empty"), "-o", str(output)])
    assert empty.exit_code == 2
    assert "holds no definitions, workloads or solutions" in empty.output
    assert "kernelarena report rmsnorm --dataset" in empty.output


def test_run_dataset_without_names_runs_only_its_definition(tmp_path: Path) -> None:
    """The bar: ``kernelarena run --dataset D`` with no names on a dataset of one definition runs
    that definition's jobs and nothing of the built-in library."""
    dataset = tmp_path / "mine"
    vector_scale_dataset({}, root=dataset, sizes=(100, 200))
    arguments = ["run", "--dataset", str(dataset), "--device", "cpu", "--json", "--trials", "1"]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.output
    # Solutions registered by other tests in this process may join vector_scale's own.
    first = result.stderr.splitlines()[0]
    planned = r"\d+ jobs of 1 definition \(vector_scale: \d+ solutions? x 2 workloads\) on cpu"
    assert re.match(planned, first), first
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    ran = {(t["definition"], t["workload"]["uuid"]) for t in payload["traces"]}
    assert ran == {("vector_scale", "n100"), ("vector_scale", "n200")}
    assert "vector_scale_good_first" in {t["solution"] for t in payload["traces"]}


def test_run_dataset_without_anything_of_its_own(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["run", "--dataset", str(empty), "--device", "cpu"])
    assert result.exit_code == 2
    assert "holds no definitions, workloads or solutions" in result.output
    assert "or add --library" in result.output


def test_selection_of_a_datasets_own_jobs(tmp_path: Path) -> None:
    """Workloads a dataset holds for a definition it does not define (shapes traced from a
    program) choose that definition, and only the jobs on those workloads."""
    user = TraceSet(root=None)
    traced = workload(7, 4096)
    user.workloads["rmsnorm_bf16"] = [traced]
    selection = dataset_selection(user, None, "my-shapes", library=False)
    assert selection.names == ["rmsnorm_bf16"]
    assert selection.own_jobs == {"rmsnorm_bf16": (set(), {traced.uuid})}
    assert dataset_selection(user, ["rmsnorm"], "my-shapes", library=False).names == ["rmsnorm"]
    assert dataset_selection(user, None, "my-shapes", library=True).names is None  # everything
    assert (
        dataset_selection(user, None, None, library=False).names is None
    )  # no --dataset: as before
