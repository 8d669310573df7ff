"""The scaling runs' diagnostics: which jobs' judge time grew with more devices
(``benchmarks/scaling_growth.py``), and the GPUs' clocks by how many were busy
(``scripts/dmon_summary.py``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from benchmarks.scaling_growth import growth, growth_lines, judge_ms

_SPEC = importlib.util.spec_from_file_location(
    "dmon_summary", Path(__file__).resolve().parents[1] / "scripts" / "dmon_summary.py"
)
assert _SPEC is not None and _SPEC.loader is not None
dmon_summary = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(dmon_summary)


def _record(draw: float, clocks: float, axes: dict[str, int]) -> dict[str, Any]:
    return {
        "device": "cuda:0",
        "axes": axes,
        "ms": {
            "timing/make_sets/draw": draw,
            "timing/judge_clocks/sandbox:eager": clocks,
            "idle": 50.0,  # not the judge's: left out of its time
        },
    }


def test_growth_names_the_jobs_and_stages_that_grew() -> None:
    single = {
        "rmsnorm_bf16/triton/small": _record(10.0, 100.0, {"rows": 1}),
        "rmsnorm_bf16/triton/large": _record(400.0, 900.0, {"rows": 1000000}),
        "scale_bf16/cuda/small": _record(5.0, 50.0, {"n": 7}),
    }
    wide = {
        "rmsnorm_bf16/triton/small": _record(12.0, 100.0, {"rows": 1}),
        "rmsnorm_bf16/triton/large": _record(1400.0, 900.0, {"rows": 1000000}),
        "scale_bf16/cuda/small": _record(5.0, 50.0, {"n": 7}),
        "scale_bf16/cuda/only-wide": _record(1.0, 1.0, {"n": 1}),
    }
    assert judge_ms(single["rmsnorm_bf16/triton/small"]) == 110.0
    found = growth(single, wide, top=2)
    assert [band["jobs"] for band in found["bands"]] == [2, 1]  # under 250 ms, over 1000
    long_band = found["bands"][1]
    assert long_band["ms_per_job_before"] == 1300.0 and long_band["ms_per_job_after"] == 2300.0
    assert next(iter(long_band["grown_stages_ms"])) == "timing/make_sets"  # ties: by name
    assert long_band["grown_stages_ms"]["timing/make_sets/draw"] == 1000.0
    assert found["median_ratio_by_definition"] == {"rmsnorm_bf16": 1.394, "scale_bf16": 1.0}
    first = found["most_grown"][0]
    assert first["job"] == "rmsnorm_bf16/triton/large" and first["axes"] == {"rows": 1000000}
    lines = growth_lines(found, "2 devices")
    assert "rmsnorm_bf16/triton/large {'rows': 1000000}: 1300.0 -> 2300.0 ms" in "\n".join(lines)


DMON = """\
#Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk
#HH:MM:SS    Idx      W      C      C      %      %      %      %      %      %    MHz    MHz
 10:00:01      0    300     40     45     80     30      0      0      0      0   3201   1980
 10:00:01      1     80     35     40      0      0      0      0      0      0   3201    345
 10:00:02      0    320     40     45     70     30      0      0      0      0   3201   1960
 10:00:02      1    290     35     40     75      0      0      0      0      0   3201   1700
 10:00:03      0    305     40     45      -     30      0      0      0      0   3201   1800
"""


def test_dmon_summary_groups_seconds_by_busy_gpus() -> None:
    rows = dmon_summary.samples(DMON)
    assert len(rows) == 5
    lines = dmon_summary.summary(rows, busy=30.0)
    table = [line.split() for line in lines[1:]]
    # busy GPUs, gpu, seconds, SM MHz, mem MHz, power W, SM util %: a second without a reading
    # ("-") is not a busy one
    assert table == [
        ["1", "0", "1", "1980", "3201", "300", "80"],
        ["2", "0", "1", "1960", "3201", "320", "70"],
        ["2", "1", "1", "1700", "3201", "290", "75"],
    ]


def _write_traces(folder: Path, stamps: list[tuple[str, str, str]]) -> None:
    """Traces of (seconds after 12:00, solution, workload uuid), one file a solution."""
    for seconds, solution, workload in stamps:
        path = folder / "traces" / "op" / f"{solution}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        trace = {
            "solution": solution,
            "workload": {"uuid": workload},
            "evaluation": {"timestamp": f"2026-11-28T12:00:{seconds}+00:00"},
        }
        with path.open("a") as handle:
            handle.write(json.dumps(trace) + "\n")


def test_run_walls_pair_the_jobs_both_runs_reached_and_split_first_jobs(tmp_path: Path) -> None:
    from benchmarks.compare_run_walls import job_walls, kind

    before, after = tmp_path / "before", tmp_path / "after"
    # Two solutions; the run before was cut short after three jobs.
    _write_traces(
        before, [("00", "op_cuda", "w1"), ("10", "op_cuda", "w2"), ("25", "op_triton", "w1")]
    )
    _write_traces(
        after,
        [
            ("00", "op_cuda", "w1"),
            ("02", "op_cuda", "w2"),
            ("12", "op_triton", "w1"),
            ("13", "op_triton", "w2"),
        ],
    )
    walls_before, first_before, count_before = job_walls(before)
    walls_after, first_after, count_after = job_walls(after)
    assert (count_before, count_after) == (3, 4)
    # The first trace has no gap before it; each later job is the gap since the one before.
    assert walls_before == {("op_cuda", "w2"): 10.0, ("op_triton", "w1"): 15.0}
    assert walls_after[("op_triton", "w2")] == 1.0
    assert set(walls_before) & set(walls_after) == {("op_cuda", "w2"), ("op_triton", "w1")}
    assert first_after == {("op_cuda", "w1"), ("op_triton", "w1")} == first_before
    assert [kind(s) for s in ("rmsnorm_bf16_torch_compile", "x_sdpa_flash", "x_triton")] == [
        "torch_compile",
        "sdpa",
        "triton",
    ]


def test_first_jobs_show_when_each_solution_began_and_what_its_first_job_waited_for() -> None:
    from benchmarks.bench_vs_flashinfer_bench import first_jobs

    def job(solution: str, workload: str, ms: dict[str, float], at: float) -> dict[str, Any]:
        return {"solution": solution, "workload": workload, "ms": ms, "finished_at": at}

    record = {
        "started_at": 100.0,
        "job_stages": [
            job(
                "triton",
                "b1",
                {
                    "sandbox_start/new_sandbox": 50.0,
                    "sandbox_start/new_sandbox/forks_at_start": 600.0,
                    "sandbox_start/new_sandbox/sandbox_ready": 250.0,
                    "checks": 120.0,
                },
                102.5,
            ),
            job("triton", "b8", {"checks": 90.0}, 103.0),
            job(
                "eager", "b1", {"checks/sandbox:eager": 30.4, "checks": 10.0, "reply": 0.2}, 104.25
            ),
        ],
    }
    assert first_jobs(record) == [
        "triton: first job done 2.50 s in "
        "(sandbox_start 900 [forks_at_start 600, sandbox_ready 250], checks 120 ms)",
        "eager: first job done 4.25 s in (checks 40 ms)",
    ]
    # With the worker's start-up (``LocalExecutor``): when the command spawned it, and its ready.
    phases = {"import_torch_s": 1.4, "cuda_init_s": 0.02}
    record["worker_startup"] = [
        {"spawned_at": 100.3, "total_s": 1.7, "python_s": 0.05, "phases_s": phases}
    ]
    assert first_jobs(record)[0] == (
        "worker spawned 0.30 s, ready 2.00 s "
        "(1.70 s: python 0.05 s, import torch 1.40 s, cuda init 0.02 s)"
    )


def test_scaling_runs_the_device_counts_asked_for() -> None:
    from benchmarks.bench_scaling import chosen_counts

    assert chosen_counts(None, 4) == [1, 2, 4]
    assert chosen_counts(None, 3) == [1, 2, 3]
    assert chosen_counts("4", 4) == [4]
    assert chosen_counts("4,1,1", 4) == [1, 4]
    for wrong in ("0", "5", ","):
        with pytest.raises(SystemExit, match="between 1 and 4"):
            chosen_counts(wrong, 4)


def test_host_cpu_reads_busy_and_stolen_cores_between_two_readings(tmp_path: Path) -> None:
    import os

    from benchmarks.host_cpu import HostCpu, describe

    ticks = os.sysconf("SC_CLK_TCK")
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal, in ticks: then 2 s later
    stat.write_text("cpu  100 0 50 1000 10 0 0 5 0 0\ncpu0 1 2 3\n")
    before = HostCpu.read(stat)
    stat.write_text(
        f"cpu  {100 + 6 * ticks} 0 {50 + 2 * ticks} {1000 + 7 * ticks} 10 0 0 {5 + ticks}\n"
    )
    after = HostCpu.read(stat)
    assert before is not None and after is not None
    after = HostCpu(after.seconds, before.taken_at + 2.0)
    used = after.since(before)
    assert used == {"wall_s": 2.0, "busy_cores": 4.0, "steal_cores": 0.5, "idle_cores": 3.5}
    assert describe(used) == "host CPU: 4.0 cores busy, 0.5 stolen"
    stat.write_text("intr 1 2 3\n")
    assert HostCpu.read(stat) is None
    assert HostCpu.read(tmp_path / "absent") is None


def test_sandbox_wait_sums_a_jobs_waits_for_new_sandboxes() -> None:
    """A job's own new sandbox (its stage and what it holds) and its reference's count; its other
    stages do not, and a job that waited under 50 ms is not listed."""
    from types import SimpleNamespace

    from benchmarks.bench_scaling import sandbox_wait

    job = SimpleNamespace(key=("rmsnorm_bf16", "rmsnorm_bf16_triton", "w1"))
    waited = SimpleNamespace(
        device="cuda:2",
        stages={
            "sandbox_start/new_sandbox": 0.002,
            "sandbox_start/new_sandbox/sandbox_ready": 1.2,
            "checks/sandbox_ready": 0.3,
            "checks/expected": 0.5,
        },
    )
    wait = sandbox_wait(job, waited, 1, 12.5)  # type: ignore[arg-type]
    assert wait == {
        "job": "rmsnorm_bf16/rmsnorm_bf16_triton/w1",
        "device": "cuda:2",
        "nth": 1,
        "done_at_s": 12.5,
        "total_ms": 1502.0,
        "ms": {
            "sandbox_start/new_sandbox": 2.0,
            "sandbox_start/new_sandbox/sandbox_ready": 1200.0,
            "checks/sandbox_ready": 300.0,
        },
    }
    served = SimpleNamespace(device="cuda:2", stages={"checks/sandbox_ready": 0.04, "timing": 1.0})
    assert sandbox_wait(job, served, 2, 13.0) is None  # type: ignore[arg-type]
