"""Datasets in FlashInfer-Trace layout load, save and load again losing nothing; ours load in the peer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kernelarena.data import Environment, Performance, Status, TraceSet
from kernelarena.evaluate.inputs import generate_inputs
from kernelarena.evaluate.options import make_trace
from tests.data import peer_dataset


def _dumps(trace_set: TraceSet) -> dict[str, object]:
    return {
        "definitions": {n: d.to_json_dict() for n, d in trace_set.definitions.items()},
        "solutions": {n: s.to_json_dict() for n, s in trace_set.solutions.items()},
        "workloads": {n: [w.to_json_dict() for w in ws] for n, ws in trace_set.workloads.items()},
        "traces": {n: [t.to_json_dict() for t in ts] for n, ts in trace_set.traces.items()},
    }


def test_peer_dataset_loads_with_its_conventions(tmp_path: Path) -> None:
    loaded = TraceSet.load(peer_dataset.write(tmp_path / "peer"), strict=True)
    definition = loaded.definitions["rmsnorm_h128"]
    assert definition.const_axes == {"hidden_size": 128}
    assert definition.free_axes == ["batch_size"]
    assert definition.inputs["eps"].shape is None
    solution = loaded.solutions["rmsnorm_h128_torch"]
    assert solution.spec.destination_passing_style is True  # the peer's default
    assert [w.uuid for w in loaded.workloads["rmsnorm_h128"]] == ["w-random", "w-blob"]
    statuses = [t.evaluation.status for t in loaded.traces["rmsnorm_h128"]]  # type: ignore[union-attr]
    assert statuses == [Status.PASSED, Status.RUNTIME_ERROR]


def test_round_trip_keeps_every_field_and_the_blob(tmp_path: Path) -> None:
    first = TraceSet.load(peer_dataset.write(tmp_path / "peer"), strict=True)
    first.save(tmp_path / "copy")
    second = TraceSet.load(tmp_path / "copy", strict=True)
    assert _dumps(first) == _dumps(second)
    saved = json.loads((tmp_path / "copy/definitions/rmsnorm/rmsnorm_h128.json").read_text())
    assert saved["future_field"] == {"kept": True}
    assert second.solutions["rmsnorm_h128_torch"].to_json_dict()["unknown_solution_field"] == [
        1,
        2,
        3,
    ]
    assert (tmp_path / "copy/blob/workloads/rmsnorm/rmsnorm_h128/w-blob.safetensors").is_file()
    blob_workload = second.workloads["rmsnorm_h128"][1]
    definition = second.definitions["rmsnorm_h128"]
    inputs = generate_inputs(
        definition,
        blob_workload,
        definition.resolve_axes(blob_workload.axes),
        torch.device("cpu"),
        0,
        None,
        second.blob_root(blob_workload),
    )
    original = generate_inputs(
        definition,
        blob_workload,
        definition.resolve_axes(blob_workload.axes),
        torch.device("cpu"),
        0,
        None,
        first.blob_root(first.workloads["rmsnorm_h128"][1]),
    )
    assert torch.equal(inputs["hidden_states"], original["hidden_states"])  # type: ignore[arg-type]


def test_saving_never_replaces_a_different_file(tmp_path: Path) -> None:
    loaded = TraceSet.load(peer_dataset.write(tmp_path / "peer"), strict=True)
    loaded.save(tmp_path / "copy")
    target = tmp_path / "copy/definitions/rmsnorm/rmsnorm_h128.json"
    target.write_text(target.read_text().replace("hidden size 128", "edited by hand"))
    with pytest.raises(FileExistsError, match="not replacing"):
        loaded.save(tmp_path / "copy")
    assert "edited by hand" in target.read_text()


def test_our_library_loads_in_flashinfer_bench(tmp_path: Path) -> None:
    peer = pytest.importorskip("flashinfer_bench.data")
    from kernelarena.library import load_library

    ours = load_library()
    ours.problems.clear()
    ours.traces.clear()  # the shipped traces load there too; this test checks the two added below
    definition = ours.definitions["scale_bf16"]
    environment = Environment(
        hardware="NVIDIA H200",
        libs={"torch": "2.11"},
        device="cuda:0",
        ceilings={"copy_gbps": 4250.0},
    )
    for status, performance in (
        (
            Status.PASSED,
            Performance(
                latency_ms=0.01,
                reference_latency_ms=0.02,
                speedup_factor=2.0,
                latency_p20_ms=0.009,
                latency_p80_ms=0.011,
                sample_count=100,
                samples_ms=[0.01] * 3,
                timing_mode="cuda_graph",
                achieved_gbps=3000.0,
                ceiling_fraction=0.7,
            ),
        ),
        (Status.TIMEOUT, None),
    ):
        ours.append_trace(
            make_trace(
                definition,
                ours.solutions["scale_bf16_triton"],
                ours.workloads["scale_bf16"][0],
                environment,
                status,
                "log",
                performance=performance,
            )
        )
    exported = tmp_path / "exported"
    ours.save(exported)
    theirs = peer.TraceSet.from_path(str(exported))
    assert [t.evaluation.status.value for t in theirs.traces["scale_bf16"]] == ["PASSED", "TIMEOUT"]
    assert theirs.traces["scale_bf16"][0].evaluation.performance.speedup_factor == 2.0
    assert set(theirs.definitions) == set(ours.definitions)
    assert {s.name for ss in theirs.solutions.values() for s in ss} == set(ours.solutions)
    assert sum(len(w) for w in theirs.workloads.values()) == sum(
        len(w) for w in ours.workloads.values()
    )
    for name, definition in theirs.definitions.items():
        assert list(definition.inputs) == list(ours.definitions[name].inputs)


def test_an_append_after_a_torn_last_line_drops_it_and_keeps_a_complete_one(
    tmp_path: Path,
) -> None:
    """A kill in the middle of a trace's write leaves its line torn: the next append (a resumed
    run) removes it, since it recorded nothing and its job runs again. A complete last line
    without its newline (a file edited by hand) is kept."""
    from kernelarena.data import Workload
    from kernelarena.data.dataset import append_line

    first = Workload(uuid="a", axes={"n": 1}, inputs={})
    second = Workload(uuid="b", axes={"n": 2}, inputs={})
    torn = tmp_path / "torn.jsonl"
    torn.write_text(first.to_json() + "\n" + second.to_json()[:17])
    append_line(torn, second, root=tmp_path)
    assert torn.read_text().splitlines() == [first.to_json(), second.to_json()]

    unended = tmp_path / "unended.jsonl"
    unended.write_text(first.to_json())
    append_line(unended, second, root=tmp_path)
    assert unended.read_text().splitlines() == [first.to_json(), second.to_json()]
