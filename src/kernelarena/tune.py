"""``kernelarena tune``: measure the library (or named operators) on this machine's GPUs within a time
budget, into the user's dataset, where apply and ``kernelarena dispatch show`` find them.

What it measures: every solution at the workloads apply tables are about: the performance suite,
and first the workloads a program of the user's recorded (tag ``traced``, docs/apply.md), operator
by operator (definition by definition).

The budget: own traces of a definition replace the borrowed ones wholesale (``dispatch/borrow.py``),
so a definition measured for half of its solutions would decide between those alone. Tune therefore
finishes every definition it starts, and starts one only while the time spent so far plus its jobs
at the seconds per job seen so far fits in the budget; one that does not is left for the next run
(a smaller one after it may still fit). The first definition of a run always starts. Resumable:
jobs whose traces are in the dataset with today's hashes on this hardware are skipped (the
runner's ``--resume``), so running tune again goes on where the last one stopped.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from kernelarena.evaluate.executors.devices import resolve_devices
from kernelarena.evaluate.executors.jobs import Job, JobResult, Timeouts
from kernelarena.evaluate.executors.runner import Executor, RunSummary, plan, run_jobs
from kernelarena.evaluate.options import Options

if TYPE_CHECKING:
    from kernelarena.data import TraceSet

SUITES = ("traced", "performance")  # in this order: the user's own shapes first
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_BUDGET = re.compile(r"(\d+(?:\.\d+)?)([smh])")


class NoGPU(ValueError):
    """Tune measures GPUs; there is none here."""


def parse_budget(text: str) -> float:
    """Seconds in ``90s``, ``10m``, ``1.5h`` or ``1h30m``; a unit is required (is ``10`` ten
    seconds or ten minutes?)."""
    compact = text.strip().lower().replace(" ", "")
    parts = _BUDGET.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f"--budget: '{text}' is not a duration such as 90s, 10m, 1.5h or 1h30m")
    seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if seconds <= 0:
        raise ValueError(f"--budget: '{text}' is no time at all")
    return seconds


def gpu_devices(requested: str | None) -> list[str]:
    """The GPUs to measure on: ``requested`` (``cuda``, ``cuda:0,cuda:1``), default every one."""
    devices = resolve_devices(requested or "auto")
    if "cpu" in devices:
        raise NoGPU(
            "kernelarena tune measures on a GPU and none is visible here (nvidia-smi lists none). "
            "Without one, apply runs each built-in operator's torch solution; to measure on the "
            "CPU anyway: kernelarena run NAMES --device cpu"
        )
    return devices


def tune_plan(trace_set: TraceSet, names: Sequence[str] | None, options: Options) -> list[Job]:
    """Every solution at the traced, then the performance workloads, definition by definition;
    definitions with traced workloads first."""
    found: dict[str, list[Job]] = {}
    for suite in SUITES:
        for job in plan(trace_set, names, None, suite, True, options):
            found.setdefault(job.definition.name, []).append(job)
    ordered = sorted(found.values(), key=lambda jobs: not _has_traced(jobs))  # stable
    unique: dict[tuple[str, str, str], Job] = {}
    for job in itertools.chain.from_iterable(ordered):
        unique.setdefault(job.key, job)  # an untagged workload belongs to both suites
    return [dataclasses.replace(job, id=i) for i, job in enumerate(unique.values())]


def _has_traced(jobs: list[Job]) -> bool:
    return any("traced" in (job.workload.tags or []) for job in jobs)


@dataclass
class BudgetedExecutor:
    """An Executor that runs whole definitions while the budget is expected to hold."""

    inner: Executor
    budget_s: float
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=-1.0)
    left: list[Job] = field(default_factory=list)  # not started: the budget would not hold
    jobs_run: int = 0
    seconds_run: float = 0.0

    def __post_init__(self) -> None:
        if self.started < 0:
            self.started = self.clock()

    def start(self) -> list[dict[str, Any]]:
        return self.inner.start()

    def close(self) -> None:
        self.inner.close()

    def remaining_s(self) -> float:
        return self.budget_s - (self.clock() - self.started)

    def run(self, jobs: Sequence[Job], on_result: Callable[[Job, JobResult], None]) -> None:
        ran = 0
        for _, group in itertools.groupby(jobs, key=lambda job: job.definition.name):
            batch = list(group)
            if not self._fits(len(batch), first=ran == 0):
                self.left += batch
                continue
            began = self.clock()
            self.inner.run(batch, on_result)
            ran += len(batch)
            self._learn(self.clock() - began, len(batch))

    def _fits(self, count: int, first: bool) -> bool:
        if first:
            return True
        if not self.jobs_run:
            return self.remaining_s() > 0
        seconds_per_job = self.seconds_run / self.jobs_run
        return count * seconds_per_job <= self.remaining_s()

    def _learn(self, seconds: float, count: int) -> None:
        self.jobs_run += count
        self.seconds_run += seconds


@dataclass
class TuneSummary:
    run: RunSummary
    left: list[Job]

    @property
    def definitions_left(self) -> list[str]:
        return sorted({job.definition.name for job in self.left})


def summary_lines(summary: TuneSummary) -> list[str]:
    run = summary.run
    passed = sum(t.passed for t in run.traces)
    lines = [
        f"{len(run.traces)} measured ({passed} passed, {len(run.failures)} failed), "
        f"{len(run.skipped)} skipped, {run.resumed} already done"
    ]
    if summary.left:
        lines.append(
            f"{len(summary.left)} jobs of {len(summary.definitions_left)} definitions left for the "
            f"next run (run the same command again): {', '.join(summary.definitions_left)}"
        )
    hardware = ", ".join(sorted({e["hardware"] for e in run.environments}))
    lines.append(f"apply and 'kernelarena dispatch show NAME' use these traces on {hardware}")
    return lines


def run_tune(
    jobs: Sequence[Job],
    executor: BudgetedExecutor,
    output: TraceSet,
    on_progress: Callable[[Job, JobResult | None], None] | None = None,
) -> TuneSummary:
    """Run ``jobs`` within the executor's budget, skipping those already done; traces are
    appended to ``output`` one by one as they come."""
    summary = run_jobs(jobs, executor, output, resume=True, on_progress=on_progress)
    return TuneSummary(summary, list(executor.left))


def local_executor(devices: list[str], timeouts: Timeouts) -> Executor:
    """One worker per GPU, started now: they import torch while the datasets load."""
    from kernelarena.evaluate.executors.local import LocalExecutor

    executor = LocalExecutor(devices, timeouts)
    executor.launch()
    return executor


def run_with_progress(
    jobs: Sequence[Job], executor: BudgetedExecutor, output: TraceSet, console: Console
) -> TuneSummary:
    """``run_tune`` with a progress bar: jobs done of planned, the solution at work, the budget
    left."""
    columns = (BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[budget]}"))
    with Progress(
        TextColumn("{task.description}"), *columns, console=console, transient=True
    ) as bar:
        task = bar.add_task("tuning", total=len(jobs), budget="")

        def advance(job: Job, result: JobResult | None) -> None:
            left = max(0.0, executor.remaining_s()) / 60
            bar.update(
                task,
                advance=1,
                description=f"tuning {job.solution.name}",
                budget=f"{left:.1f} min left",
            )

        return run_tune(jobs, executor, output, advance)
