"""kernelarena tune without a GPU: the budget, the plan, whole definitions within the budget, resume,
and the command line with a stand-in executor (workers that answer at once with made-up times)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kernelarena import tune as tuning
from kernelarena.cli import app
from kernelarena.data import (
    Environment,
    Performance,
    RandomInput,
    ScalarInput,
    Status,
    TraceSet,
    Workload,
)
from kernelarena.datasets import load_default
from kernelarena.evaluate.executors.jobs import Job, JobResult
from kernelarena.evaluate.options import Options, make_trace
from kernelarena.library import load_library

GPU = "NVIDIA H1000 Made-Up"
SECONDS_PER_JOB = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class InstantWorkers:
    """An Executor whose every job passes at once, the clock moved on by SECONDS_PER_JOB."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self.ran: list[Job] = []
        self.closed = False

    def start(self) -> list[dict[str, Any]]:
        return [{"hardware": GPU, "device": "cuda:0", "libs": {}}]

    def run(self, jobs: Sequence[Job], on_result: Callable[[Job, JobResult], None]) -> None:
        for job in jobs:
            self.clock.now += SECONDS_PER_JOB
            self.ran.append(job)
            performance = Performance(latency_ms=0.01 * (1 + job.id % 5), eager_call_ms=0.02)
            trace = make_trace(
                job.definition,
                job.solution,
                job.workload,
                Environment(hardware=GPU, device="cuda:0"),
                Status.PASSED,
                "",
                None,
                performance,
            )
            on_result(job, JobResult(trace=trace, device="cuda:0"))

    def close(self) -> None:
        self.closed = True


def test_budgets_need_a_unit() -> None:
    assert tuning.parse_budget("90s") == 90
    assert tuning.parse_budget("10m") == 600
    assert tuning.parse_budget("1.5h") == tuning.parse_budget("1h30m") == 5400
    for bad in ("10", "m", "ten minutes", "10m5", "0m", "-5m"):
        with pytest.raises(ValueError, match="--budget"):
            tuning.parse_budget(bad)


def test_the_plan_measures_traced_shapes_first_then_the_performance_suite() -> None:
    library = load_library()
    definition = library.definitions["rmsnorm_fp16"]
    traced = Workload(
        axes={"rows": 3, "hidden": 4096},
        inputs={"x": RandomInput(), "weight": RandomInput(), "eps": ScalarInput(value=1e-6)},
        uuid="traced-3x4096",
        tags=["traced"],
    )
    library.add_workload(definition.name, traced, persist=False)
    jobs = tuning.tune_plan(library, ["rmsnorm"], Options())
    assert [job.id for job in jobs] == list(range(len(jobs)))
    assert len({job.key for job in jobs}) == len(jobs)
    order = list(dict.fromkeys(job.definition.name for job in jobs))
    assert order[0] == "rmsnorm_fp16" and sorted(order) == [
        "rmsnorm_bf16",
        "rmsnorm_fp16",
        "rmsnorm_fp32",
    ]
    tags = {tag for job in jobs for tag in job.workload.tags or []}
    assert tags == {"traced", "performance"}
    solutions = {s.name for s in library.solutions_for("rmsnorm_fp16")}
    first = jobs[: len(solutions)]
    assert {j.workload.uuid for j in first} == {"traced-3x4096"}
    assert {j.solution.name for j in first} == solutions  # every solution at the traced shape


def test_whole_definitions_within_the_budget_and_a_second_run_goes_on(tmp_path: Path) -> None:
    library, user = load_default(tmp_path / "dataset")
    jobs = tuning.tune_plan(library, ["rmsnorm"], Options())
    per_definition = len(jobs) // 3
    clock = Clock()
    workers = InstantWorkers(clock)
    # Room for one and a half definitions: the second would overrun, so it waits.
    budget = SECONDS_PER_JOB * per_definition * 1.5
    first = tuning.run_tune(jobs, tuning.BudgetedExecutor(workers, budget, clock), user)
    assert len(first.run.traces) == per_definition
    assert len({job.definition.name for job in workers.ran}) == 1
    assert len(first.left) == 2 * per_definition and len(first.definitions_left) == 2
    library, user = load_default(tmp_path / "dataset")  # what a second run finds on disk
    second_workers = InstantWorkers(clock)
    second = tuning.run_tune(jobs, tuning.BudgetedExecutor(second_workers, budget, clock), user)
    assert second.run.resumed == per_definition
    assert not {j.key for j in second_workers.ran} & {j.key for j in workers.ran}
    assert len(second.left) == per_definition
    library, user = load_default(tmp_path / "dataset")
    last = tuning.run_tune(jobs, tuning.BudgetedExecutor(InstantWorkers(clock), 3600, clock), user)
    assert last.left == [] and last.run.resumed == 2 * per_definition
    assert len(TraceSet.load(tmp_path / "dataset").traces["rmsnorm_bf16"]) == per_definition


def test_without_a_gpu_tune_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tuning, "resolve_devices", lambda requested: ["cpu"])
    result = CliRunner().invoke(app, ["tune", "--budget", "10m"])
    assert result.exit_code == 2
    assert "measures on a GPU and none is visible" in " ".join(result.output.split())
    bad = CliRunner().invoke(app, ["tune", "--budget", "10"])
    assert bad.exit_code == 2 and "90s, 10m" in bad.output


def test_tune_writes_traces_that_dispatch_show_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workers = InstantWorkers()
    monkeypatch.setattr(tuning, "resolve_devices", lambda requested: ["cuda:0"])
    monkeypatch.setattr(tuning, "local_executor", lambda devices, timeouts: workers)
    monkeypatch.setenv("KERNELARENA_CACHE", str(tmp_path / "cache"))
    dataset = ["--dataset", str(tmp_path / "dataset")]
    runner = CliRunner()
    result = runner.invoke(app, ["tune", "rmsnorm_bf16", "--budget", "1h", *dataset])
    assert result.exit_code == 0, result.output
    assert workers.closed and "already done" in result.output and GPU in result.output
    again = runner.invoke(app, ["tune", "rmsnorm_bf16", "--budget", "1h", *dataset])
    assert "0 measured" in again.output and f"{len(workers.ran)} already done" in again.output
    shown = runner.invoke(app, ["dispatch", "show", "rmsnorm_bf16", "--hardware", GPU, *dataset])
    assert shown.exit_code == 0, shown.output
    flat = " ".join(shown.output.split())
    assert f"rmsnorm_bf16 on {GPU}" in flat and "borrowed" not in flat
