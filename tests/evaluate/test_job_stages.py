"""Where a job's time goes: the judge's stage clock, the run's totals, and a real run's stages."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kernelarena.evaluate.executors.job_stages import (
    NEW_SANDBOX,
    StageTotals,
    phase_means,
    stage_table,
)
from kernelarena.evaluate.executors.jobs import Timeouts
from kernelarena.evaluate.executors.local import LocalExecutor
from kernelarena.evaluate.executors.runner import plan, run_jobs
from kernelarena.evaluate.judge import stage_clock
from kernelarena.evaluate.judge.stage_clock import StageClock
from kernelarena.evaluate.options import Options
from tests.evaluate.bad_solutions import trace_set


def test_nested_stages_are_taken_out_of_their_phase_and_everything_adds_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a clock the test moves (real sleeps overshot by 15 ms on a loaded CI machine)."""
    now = [100.0]
    monkeypatch.setattr(stage_clock, "time", SimpleNamespace(perf_counter=lambda: now[0]))

    def spend(seconds: float) -> None:
        now[0] += seconds

    clock = StageClock()
    clock.begin("checks")
    spend(0.01)
    with clock.stage("sandbox:eager"):
        spend(0.02)
        with clock.stage("sandbox:eager"):  # inside itself: the same stage
            spend(0.01)
    clock.switch("timing")
    spend(0.005)
    with clock.stage("judge_clocks"):
        spend(0.002)
        with clock.stage("sandbox:eager"):
            spend(0.01)
    seconds = clock.take()

    assert seconds == pytest.approx(
        {
            "checks": 0.01,
            "checks/sandbox:eager": 0.03,
            "timing": 0.005,
            "timing/judge_clocks": 0.002,
            "timing/judge_clocks/sandbox:eager": 0.01,
        }
    )
    assert sum(seconds.values()) == pytest.approx(now[0] - 100.0)


def test_the_clock_is_off_outside_a_job() -> None:
    clock = StageClock()
    clock.switch("checks")
    with clock.stage("sandbox:eager"):
        pass
    assert clock.take() == {}
    clock.begin("decode")
    assert set(clock.take()) == {"decode"}
    assert clock.take() == {}  # taken: off until the next job


def test_totals_by_device_phases_and_new_sandboxes() -> None:
    totals = StageTotals()
    totals.add("cuda:0", {"checks": 0.1, "checks/sandbox:eager": 0.1, "idle": 0.01})
    totals.add("cuda:0", {"checks": 0.3, NEW_SANDBOX: 2.0, "parent:delivery": 0.001})
    totals.add("cuda:1", {})  # a job no judge evaluated
    found = totals.as_json()

    assert list(found) == ["cuda:0"]
    entry = found["cuda:0"]
    assert entry["jobs"] == 2
    assert entry["jobs_in"][NEW_SANDBOX] == 1
    means = phase_means(entry)
    assert means["checks"] == pytest.approx(0.25)
    assert means["sandbox_start"] == pytest.approx(1.0)
    assert means["judge"] == pytest.approx(1.25)  # neither idle nor the parent's share
    table = "\n".join(stage_table(found))
    assert "sandboxes" in table and "1250.0" in table


def test_every_job_of_a_run_reports_its_stages() -> None:
    made = trace_set({}, sizes=(100, 200))
    jobs = plan(made, options=Options(trials=1, budget_ms=5, max_iterations=5, min_iterations=2))
    seen: list[dict[str, Any]] = []
    with LocalExecutor(["cpu"], Timeouts(run_s=120), measure_ceilings=False) as executor:
        summary = run_jobs(jobs, executor, None, on_progress=lambda j, r: seen.append(r.stages))

    assert len(seen) == len(jobs)
    for stages in seen:
        assert {"decode", "checks", "timing", "reply", "idle", "parent:delivery"} <= set(stages)
        assert all(value >= 0 for value in stages.values())
    entry = summary.stages["cpu"]
    assert entry["jobs"] == len(jobs)
    assert entry["jobs_in"][NEW_SANDBOX] == 1  # one solution, one sandbox
    assert entry["jobs_in"]["parent:trace_write"] == len(jobs)
    # Each job's own record, in the order the jobs finished: its first job alone started a sandbox.
    assert [(r["solution"], r["workload"]) for r in summary.job_stages] == [
        (j.solution.name, j.workload.uuid) for j in jobs
    ]
    first, *later = summary.job_stages
    assert first["device"] == "cpu" and first["ms"][NEW_SANDBOX] > 0
    # What the new sandbox's stage waited for: the sandbox saying it is ready, apart.
    assert f"{NEW_SANDBOX}/sandbox_ready" in first["ms"]
    assert all(NEW_SANDBOX not in r["ms"] for r in later)
    finished = [r["finished_at"] for r in summary.job_stages]
    assert finished == sorted(finished)
