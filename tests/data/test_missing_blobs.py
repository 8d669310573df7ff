"""Workloads whose safetensors blobs are not here: one line per missing folder or file (never one per
tensor), those workloads left out of runs, the rest of the definition kept."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from typer.testing import CliRunner

from kernelarena.cli import app
from kernelarena.data import TraceSet
from kernelarena.evaluate.executors.runner import plan
from tests.data import peer_dataset


def _blob_input(path: str, key: str) -> dict[str, str]:
    return {"type": "safetensors", "path": path, "tensor_key": key}


def _with_missing_blobs(root: Path) -> Path:
    """The peer dataset (2 workloads, one blob present) plus 3 workloads reading a folder that is
    not there and 1 reading a file missing from a folder that is."""
    peer_dataset.write(root)
    lines = []
    missing = [
        (f"w-gone-{i}", f"./blob/workloads/rmsnorm/gone/w-gone-{i}.safetensors") for i in range(3)
    ]
    missing.append(("w-absent", "blob/workloads/rmsnorm/rmsnorm_h128/absent.safetensors"))
    for uuid, path in missing:
        line = copy.deepcopy(peer_dataset.WORKLOADS[1])
        line["workload"]["uuid"] = uuid
        line["workload"]["inputs"]["hidden_states"] = _blob_input(path, "hidden_states")
        line["workload"]["inputs"]["weight"] = _blob_input(path, "weight")
        lines.append(json.dumps(line))
    with open(root / "workloads/rmsnorm/rmsnorm_h128.jsonl", "a") as handle:
        handle.write("\n".join(lines) + "\n")
    return root


def test_missing_blobs_are_one_line_per_folder_or_file(tmp_path: Path) -> None:
    loaded = TraceSet.load(_with_missing_blobs(tmp_path / "data"))
    rendered = [str(p) for p in loaded.problems]
    assert rendered == [
        "data/workloads/rmsnorm/rmsnorm_h128.jsonl:3-5: workload.inputs.{hidden_states,weight}.path: "
        "folder 'blob/workloads/rmsnorm/gone/' does not exist (3 safetensors file(s) expected in it): "
        "its 3 workloads are skipped",
        "data/workloads/rmsnorm/rmsnorm_h128.jsonl:6: workload.inputs.{hidden_states,weight}.path: "
        "file 'blob/workloads/rmsnorm/rmsnorm_h128/absent.safetensors' does not exist: "
        "the workload is skipped",
    ]
    assert len(loaded.workloads["rmsnorm_h128"]) == 6  # all kept, so a save loses none
    assert [w.uuid for w in loaded.workloads_for("rmsnorm_h128")] == ["w-random", "w-blob"]
    jobs = plan(loaded, suite="all")
    assert {job.workload.uuid for job in jobs} == {"w-random", "w-blob"}


def test_a_save_keeps_the_lines_and_the_blobs_that_exist(tmp_path: Path) -> None:
    loaded = TraceSet.load(_with_missing_blobs(tmp_path / "data"))
    loaded.save(tmp_path / "copy")
    again = TraceSet.load(tmp_path / "copy")
    assert [w.uuid for w in again.workloads["rmsnorm_h128"]] == [
        w.uuid for w in loaded.workloads["rmsnorm_h128"]
    ]
    assert (tmp_path / "copy/blob/workloads/rmsnorm/rmsnorm_h128/w-blob.safetensors").is_file()
    assert len(again.problems) == 2 and set(again.unavailable) == set(loaded.unavailable)


def test_validate_prints_the_groups_not_one_line_per_tensor(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["validate", str(_with_missing_blobs(tmp_path / "data"))])
    assert result.exit_code == 1
    output = " ".join(result.output.split())  # the console wraps long lines
    assert output.count("does not exist") == 2, result.output
    assert "2 problem(s)" in result.output
