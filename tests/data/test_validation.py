"""Every loader problem names its file and field; one broken file never hides the rest."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelarena.cli import app
from kernelarena.data import TraceSet
from tests.data import peer_dataset


def _write(path: Path, payload: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2))


def _broken_dataset(root: Path) -> Path:
    peer_dataset.write(root)
    good = peer_dataset.DEFINITION
    definitions = root / "definitions" / "rmsnorm"

    no_run = copy.deepcopy(good) | {
        "name": "no_run",
        "reference": "def forward(x):\n    return x\n",
    }
    _write(definitions / "no_run.json", no_run)

    bad_axis = copy.deepcopy(good) | {"name": "bad_axis"}
    bad_axis["inputs"]["weight"]["shape"] = ["hidden_size", "heads"]
    _write(definitions / "bad_axis.json", bad_axis)

    bad_dtype = copy.deepcopy(good) | {"name": "bad_dtype"}
    bad_dtype["outputs"]["output"]["dtype"] = "bfloat17"
    _write(definitions / "bad_dtype.json", bad_dtype)

    _write(definitions / "duplicate.json", copy.deepcopy(good))

    solutions = root / "solutions" / "rmsnorm" / "rmsnorm_h128"
    climbing = copy.deepcopy(peer_dataset.SOLUTION) | {"name": "climbing"}
    climbing["sources"][0]["path"] = "../../etc/passwd"
    climbing["spec"]["entry_point"] = "../../etc/passwd::run"
    _write(solutions / "climbing.json", climbing)

    absolute = copy.deepcopy(peer_dataset.SOLUTION) | {"name": "absolute"}
    absolute["sources"][0]["path"] = "/tmp/main.py"
    _write(solutions / "absolute.json", absolute)

    missing_entry = copy.deepcopy(peer_dataset.SOLUTION) | {"name": "missing_entry"}
    missing_entry["spec"]["entry_point"] = "kernel.py::run"
    _write(solutions / "missing_entry.json", missing_entry)
    return root


EXPECTED = [
    ("definitions/rmsnorm/no_run.json", "reference", "must define a top-level function 'run'"),
    ("definitions/rmsnorm/bad_axis.json", "inputs.weight.shape[1]", "axis 'heads' is not declared"),
    ("definitions/rmsnorm/bad_dtype.json", "outputs.output.dtype", "Input should be"),
    ("definitions/rmsnorm/rmsnorm_h128.json", "name", "duplicate definition 'rmsnorm_h128'"),
    ("solutions/rmsnorm/rmsnorm_h128/climbing.json", "sources.0.path", "climbs out of its folder"),
    ("solutions/rmsnorm/rmsnorm_h128/absolute.json", "sources.0.path", "is absolute"),
    (
        "solutions/rmsnorm/rmsnorm_h128/missing_entry.json",
        "spec.entry_point",
        "'kernel.py' is not among the sources",
    ),
]


def test_every_problem_names_file_and_field(tmp_path: Path) -> None:
    loaded = TraceSet.load(_broken_dataset(tmp_path / "data"))
    rendered = [str(p) for p in loaded.problems]
    for file, field, message in EXPECTED:
        assert any(file in r and f": {field}: " in r and message in r for r in rendered), (
            file,
            field,
            message,
            rendered,
        )
    # the good files still loaded
    assert "rmsnorm_h128" in loaded.definitions
    assert "rmsnorm_h128_torch" in loaded.solutions
    assert len(loaded.traces["rmsnorm_h128"]) == 2


def test_strict_load_raises_with_all_problems(tmp_path: Path) -> None:
    from kernelarena.data import DatasetError

    with pytest.raises(DatasetError) as raised:
        TraceSet.load(_broken_dataset(tmp_path / "data"), strict=True)
    assert len(raised.value.problems) >= len(EXPECTED)


def test_workload_problems_name_the_line(tmp_path: Path) -> None:
    root = peer_dataset.write(tmp_path / "data")
    lines = (root / "workloads/rmsnorm/rmsnorm_h128.jsonl").read_text().splitlines()
    broken = json.loads(lines[0])
    broken["workload"]["uuid"] = "w-bad"
    broken["workload"]["axes"] = {"batch_size": 2, "hidden_size": 64}
    broken["workload"]["inputs"]["weight"] = {
        "type": "safetensors",
        "path": "blob/missing.safetensors",
        "tensor_key": "w",
    }
    (root / "workloads/rmsnorm/rmsnorm_h128.jsonl").write_text(
        "\n".join([*lines, json.dumps(broken), "{not json"]) + "\n"
    )
    rendered = [str(p) for p in TraceSet.load(root).problems]
    assert any(
        "rmsnorm_h128.jsonl:3: workload.axes: axis 'hidden_size' is const 128, got 64" in r
        for r in rendered
    ), rendered
    assert any(
        "rmsnorm_h128.jsonl:3: workload.inputs.weight.path: file 'blob/missing.safetensors' does not exist"
        in r
        for r in rendered
    )
    assert any("rmsnorm_h128.jsonl:4" in r and "Invalid JSON" in r for r in rendered), rendered


def test_validate_command_reports_and_fails_without_writing(tmp_path: Path) -> None:
    root = _broken_dataset(tmp_path / "data")
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    result = CliRunner().invoke(app, ["validate", str(root)])
    assert result.exit_code == 1
    for file, field, _ in EXPECTED:
        assert f"{file}: {field}:" in result.output
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_validate_command_passes_a_clean_dataset(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["validate", str(peer_dataset.write(tmp_path / "data"))])
    assert result.exit_code == 0, result.output
    assert "0 problem(s)" in result.output
