"""A dataset cannot make kernelarena write outside it: names are single path components, and writes
refuse a symlink (or a second hard link) that leads out of the dataset folder. Symlinks inside the
folder, and FlashInfer-Trace result folders whose definitions/, workloads/ and blob/ link elsewhere,
still work (issue 36)."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from kernelarena.data import Definition, Solution, Trace, TraceSet
from kernelarena.data.dataset_files import DatasetPathError
from tests.data import peer_dataset

TORN = '{"definition": "x", "workl'  # a last line a kill left half written


def _trace() -> Trace:
    return Trace.model_validate(peer_dataset.TRACES[0])


def _write_json(path: Path, payload: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2))


def _problems(root: Path) -> list[str]:
    return [str(p) for p in TraceSet.load(root).problems]


def test_an_absolute_op_type_is_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    root = peer_dataset.write(tmp_path / "data")
    target = tmp_path / "elsewhere"
    absolute = copy.deepcopy(peer_dataset.DEFINITION) | {"name": "abs", "op_type": str(target)}
    _write_json(root / "definitions" / "rmsnorm" / "abs.json", absolute)
    loaded = TraceSet.load(root)
    assert "abs" not in loaded.definitions
    assert any(
        "definitions/rmsnorm/abs.json: op_type:" in p and "is an absolute path" in p
        for p in _problems(root)
    ), _problems(root)
    with pytest.raises(ValidationError, match="op_type"):
        Definition.model_validate(absolute)
    assert not target.exists()


@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [
        ("definition", "name", "../../escaped"),
        ("definition", "op_type", ".."),
        ("definition", "name", "a\0b"),
        ("solution", "name", "../../escaped"),
        ("solution", "definition", "../rmsnorm_h128"),
    ],
)
def test_names_that_are_not_one_path_component_are_refused(
    tmp_path: Path, kind: str, field: str, value: str
) -> None:
    root = peer_dataset.write(tmp_path / "data")
    if kind == "definition":
        payload = copy.deepcopy(peer_dataset.DEFINITION) | {"name": "bad", field: value}
        if field == "name":
            payload["name"] = value
        path = root / "definitions" / "rmsnorm" / "bad.json"
    else:
        payload = copy.deepcopy(peer_dataset.SOLUTION) | {"name": "bad", field: value}
        path = root / "solutions" / "rmsnorm" / "rmsnorm_h128" / "bad.json"
    _write_json(path, payload)
    label = str(path.relative_to(tmp_path))
    problems = _problems(root)
    assert any(
        p.startswith(f"{label}: {field}: ") and "single file names" in p for p in problems
    ), problems
    model = Definition if kind == "definition" else Solution
    with pytest.raises(ValidationError, match=field):
        model.model_validate(payload)


def test_a_trace_line_naming_a_climbing_definition_is_refused(tmp_path: Path) -> None:
    root = peer_dataset.write(tmp_path / "data")
    line = copy.deepcopy(peer_dataset.TRACES[0]) | {"definition": "../../../escaped"}
    traces = root / "traces" / "rmsnorm" / "rmsnorm_h128.jsonl"
    traces.write_text(traces.read_text() + json.dumps(line) + "\n")
    problems = _problems(root)
    assert any("rmsnorm_h128.jsonl:3: definition: " in p for p in problems), problems
    assert all(
        t.definition == "rmsnorm_h128" for ts in TraceSet.load(root).traces.values() for t in ts
    )


def test_a_traces_file_linked_outside_is_neither_appended_to_nor_truncated(
    tmp_path: Path,
) -> None:
    root = peer_dataset.write(tmp_path / "data")
    victim = tmp_path / "outside" / "victim.jsonl"
    victim.parent.mkdir()
    victim.write_text("the user's own line\n" + TORN)  # a torn-looking tail the append would cut
    traces = root / "traces" / "rmsnorm" / "rmsnorm_h128.jsonl"
    traces.unlink()
    traces.symlink_to(victim)
    dataset = TraceSet.load(root)
    with pytest.raises(DatasetPathError, match="leads outside the dataset folder"):
        dataset.append_trace(_trace())
    assert victim.read_text() == "the user's own line\n" + TORN

    # A link to a file that does not exist yet: not created either.
    fresh = tmp_path / "outside" / "fresh.jsonl"
    traces.unlink()
    traces.symlink_to(fresh)
    with pytest.raises(DatasetPathError):
        TraceSet.load(root).append_trace(_trace())
    assert not fresh.exists()


def test_a_traces_folder_linked_outside_is_refused(tmp_path: Path) -> None:
    root = peer_dataset.write(tmp_path / "data")
    outside = tmp_path / "outside"
    shutil.move(root / "traces", outside)
    (root / "traces").symlink_to(outside)
    before = {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    dataset = TraceSet.load(root)
    assert len(dataset.traces["rmsnorm_h128"]) == 2  # reading through the link is fine
    with pytest.raises(DatasetPathError):
        dataset.append_trace(_trace())
    with pytest.raises(DatasetPathError):  # nor a folder of a new op_type made there
        dataset.append_trace(_trace().model_copy(update={"definition": "unknown_definition"}))
    assert {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before
    assert not (outside / "unknown").exists()


def test_a_traces_folder_linked_inside_the_dataset_is_written(tmp_path: Path) -> None:
    root = peer_dataset.write(tmp_path / "data")
    kept = root / "results" / "traces"
    kept.parent.mkdir()
    shutil.move(root / "traces", kept)
    (root / "traces").symlink_to(Path("results") / "traces")
    dataset = TraceSet.load(root)
    dataset.append_trace(_trace())
    lines = (kept / "rmsnorm" / "rmsnorm_h128.jsonl").read_text().splitlines()
    assert len(lines) == 3 and Trace.model_validate_json(lines[-1]) == _trace()
    assert len(TraceSet.load(root).traces["rmsnorm_h128"]) == 3


def test_a_hard_linked_traces_file_is_refused(tmp_path: Path) -> None:
    root = peer_dataset.write(tmp_path / "data")
    traces = root / "traces" / "rmsnorm" / "rmsnorm_h128.jsonl"
    other = tmp_path / "other-name.jsonl"
    os.link(traces, other)
    before = other.read_bytes()
    with pytest.raises(DatasetPathError, match="hard links"):
        TraceSet.load(root).append_trace(_trace())
    assert other.read_bytes() == before


def test_a_flashinfer_trace_results_folder_with_linked_inputs_loads_and_takes_traces(
    tmp_path: Path,
) -> None:
    """A published result folder links definitions/, workloads/ and blob/ to the trace repository
    beside it: those are read, and traces go to its own traces/ folder."""
    repository = peer_dataset.write(tmp_path / "flashinfer_trace")
    results = tmp_path / "results"
    results.mkdir()
    for folder in ("definitions", "workloads", "blob", "solutions"):
        (results / folder).symlink_to(Path("..") / "flashinfer_trace" / folder)
    dataset = TraceSet.load(results, strict=True)
    assert "rmsnorm_h128" in dataset.definitions
    assert len(dataset.workloads_for("rmsnorm_h128")) == 2  # the blob is found through the link
    dataset.append_trace(_trace())
    written = results / "traces" / "rmsnorm" / "rmsnorm_h128.jsonl"
    assert written.is_file() and not written.is_symlink()
    assert len(written.read_text().splitlines()) == 1
    # The linked workloads folder is the repository's: adding a workload there is refused.
    workload = dataset.workloads["rmsnorm_h128"][0].model_copy(update={"uuid": "new"})
    repository_workloads = repository / "workloads" / "rmsnorm" / "rmsnorm_h128.jsonl"
    before = repository_workloads.read_bytes()
    with pytest.raises(DatasetPathError):
        dataset.add_workload("rmsnorm_h128", workload)
    assert repository_workloads.read_bytes() == before


def test_saving_into_a_folder_whose_link_leads_outside_writes_nothing_there(
    tmp_path: Path,
) -> None:
    source = TraceSet.load(peer_dataset.write(tmp_path / "data"))
    target, outside = tmp_path / "copy", tmp_path / "outside"
    target.mkdir()
    outside.mkdir()
    (target / "blob").symlink_to(outside)
    with pytest.raises(DatasetPathError):
        source.save(target)
    assert list(outside.iterdir()) == []
