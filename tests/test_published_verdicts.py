"""The published-solutions benchmark's bookkeeping: jobs, both tools' verdicts, the copies."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.published import verdicts
from benchmarks.published.copies import copy_dataset, failed_jobs, keep_only

SOLUTIONS = ("a_rmsnorm_h128", "b_rmsnorm_h128")
WORKLOADS = ("w1", "w2", "w3", "w4", "w5")


def write_dataset(root: Path) -> Path:
    (root / "definitions" / "rmsnorm").mkdir(parents=True)
    (root / "definitions" / "rmsnorm" / "rmsnorm_h128.json").write_text("{}")
    folder = root / "solutions" / "rmsnorm" / "rmsnorm_h128"
    folder.mkdir(parents=True)
    for name in SOLUTIONS:
        (folder / f"{name}.json").write_text(
            json.dumps({"name": name, "definition": "rmsnorm_h128"})
        )
    lines = [
        json.dumps({"workload": {"uuid": uuid, "axes": {"batch_size": i}, "inputs": {}}})
        for i, uuid in enumerate(WORKLOADS, start=1)
    ]
    (root / "workloads" / "rmsnorm").mkdir(parents=True)
    (root / "workloads" / "rmsnorm" / "rmsnorm_h128.jsonl").write_text("\n".join(lines) + "\n")
    return root


def trace_line(solution: str, uuid: str, status: str, log: str = "") -> str:
    workload = {"uuid": uuid, "axes": {}, "inputs": {}}
    evaluation = {"status": status, "log": log}
    return json.dumps({"solution": solution, "workload": workload, "evaluation": evaluation})


def test_first_workloads_and_jobs(tmp_path: Path) -> None:
    copy = copy_dataset(write_dataset(tmp_path / "source"), tmp_path / "copy", 4, None)
    jobs = verdicts.planned_jobs(copy)
    assert len(jobs) == 2 * 4
    assert {job["workload"] for job in jobs} == set(WORKLOADS[:4])


def test_peer_verdicts_from_log_and_saved_traces(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path)
    (dataset / "traces" / "rmsnorm").mkdir(parents=True)
    saved = trace_line("a_rmsnorm_h128", "w1", "RUNTIME_ERROR", "boom")
    (dataset / "traces" / "rmsnorm" / "rmsnorm_h128.jsonl").write_text(saved + "\n")
    log = (
        "Solution 'a_rmsnorm_h128' for workload w1: PASSED with 1.20x speedup\n"
        "Solution 'b_rmsnorm_h128' for workload w2: INCORRECT_NUMERICAL\n"
        "Health check timeout on device cuda:0\n"
    )
    found = verdicts.peer_verdicts(dataset, log)
    assert found[("a_rmsnorm_h128", "w1")]["status"] == "RUNTIME_ERROR"  # the trace wins
    assert found[("b_rmsnorm_h128", "w2")] == {"status": "INCORRECT_NUMERICAL", "from": "log"}
    assert verdicts.peer_stalls(log) == {"Health check timeout": 1}


def test_compare_lists_what_the_peer_passes_and_we_fail(tmp_path: Path) -> None:
    jobs = verdicts.planned_jobs(write_dataset(tmp_path))
    log = "x\nRuntimeError: CUDA error: operation not permitted when stream is capturing\n"
    found = {
        "peer": {(s, w): {"status": "PASSED"} for s in SOLUTIONS for w in WORKLOADS},
        "ours": {
            ("a_rmsnorm_h128", "w1"): {"status": "RUNTIME_ERROR", **verdicts.log_excerpt(log)},
            ("a_rmsnorm_h128", "w2"): {"status": "PASSED"},
        },
    }
    summary = verdicts.compare(verdicts.table(jobs, found), ["ours", "peer"])
    assert summary["pairs"] == {"PASSED / -": 8, "PASSED / RUNTIME_ERROR": 1, "PASSED / PASSED": 1}
    [failing] = summary["peer_passes_ours_fails"]
    assert failing["workload"] == "w1"
    assert failing["ours_log"].startswith("RuntimeError: CUDA error")
    assert len(summary["peer_passes_ours_not_run"]) == 8


def test_peer_copy_keeps_only_what_we_failed(tmp_path: Path) -> None:
    copy = copy_dataset(write_dataset(tmp_path / "source"), tmp_path / "copy", None, None)
    ours = {("a_rmsnorm_h128", "w2"): {"status": "COMPILE_ERROR"}}
    ours[("b_rmsnorm_h128", "w1")] = {"status": "PASSED"}
    keep_only(copy, failed_jobs(ours))
    assert [(j["solution"], j["workload"]) for j in verdicts.planned_jobs(copy)] == [
        ("a_rmsnorm_h128", "w2")
    ]


def test_compiler_error_lines_come_first() -> None:
    log = "building failed:\nFAILED: kernel.cuda.o\nkernel.cu(26): error: identifier undefined\n"
    assert (
        verdicts.log_excerpt(log)["error_lines"][0] == "kernel.cu(26): error: identifier undefined"
    )
