"""Progress of ``kernelarena run``: a live line on a terminal, plain lines every so often elsewhere.

The runner reports each job as it ends (``on_progress``), and hands jobs out in plan order, so the
earliest planned job that has not ended is at work (exactly so with one device; with several, it is
the oldest of those in flight). The time left is estimated from the jobs evaluated so far, timed
from the first result on: the workers' start-up (importing torch, measuring ceilings) comes before
it and would make every later job look slower.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.text import Text

from kernelarena.report.console import workload_label

if TYPE_CHECKING:
    from kernelarena.evaluate.executors.jobs import Job, JobResult

PLAIN_INTERVAL_S = 30.0


def duration(seconds: float) -> str:
    """``45s``, ``3m05s``, ``1h02m``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class RunProgress:
    """Counts what ended and says so: ``with RunProgress(jobs, console) as progress:`` then pass
    ``progress.on_progress`` to ``run_jobs``."""

    def __init__(
        self,
        jobs: Sequence[Job],
        console: Console,
        *,
        live: bool | None = None,
        interval_s: float = PLAIN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.jobs = list(jobs)
        self.console = console
        self.live = console.is_terminal if live is None else live
        self.interval_s = interval_s
        self.clock = clock
        self.started = clock()
        self.first_result: float | None = None
        self.evaluated = 0  # jobs run in this session (resumed ones are not)
        self.ended: set[int] = set()
        self.passed = self.failed = self.skipped = self.resumed = 0
        self._next = 0  # index into jobs of the earliest job that has not ended
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._display: Live | None = None

    # -- counting ---------------------------------------------------------------------------

    def on_progress(self, job: Job, result: JobResult | None) -> None:
        if result is None:
            self.resumed += 1
        else:
            now = self.clock()
            self.first_result = self.first_result if self.first_result is not None else now
            self.evaluated += 1
            if result.trace is not None:
                self.passed += result.trace.passed
                self.failed += not result.trace.passed
            else:
                self.skipped += 1
        self.ended.add(job.id)
        while self._next < len(self.jobs) and self.jobs[self._next].id in self.ended:
            self._next += 1

    @property
    def done(self) -> int:
        return len(self.ended)

    def running(self) -> Job | None:
        return self.jobs[self._next] if self._next < len(self.jobs) else None

    def seconds_left(self) -> float | None:
        """Jobs left times the seconds per job between the first result and now; None until two
        results have come (one result dates the start, not a rate)."""
        if self.first_result is None or self.evaluated < 2:
            return None
        per_job = (self.clock() - self.first_result) / (self.evaluated - 1)
        return per_job * (len(self.jobs) - self.done)

    def line(self) -> str:
        counts = (
            f"{self.done}/{len(self.jobs)} jobs: {self.passed} passed, {self.failed} failed"
            + (f", {self.skipped} skipped" if self.skipped else "")
            + (f", {self.resumed} already done" if self.resumed else "")
        )
        job = self.running()
        if job is None:
            at = "finishing"
        elif self.first_result is None:
            at = f"starting workers, then {job.solution.name} on {workload_label(job.workload)}"
        else:
            at = f"at {job.solution.name} on {workload_label(job.workload)}"
        left = self.seconds_left()
        timing = f"{duration(self.clock() - self.started)} elapsed" + (
            f", about {duration(left)} left" if left is not None else ""
        )
        return f"{counts}; {timing}; {at}"  # the job last: a narrow terminal cuts it short

    # -- showing ----------------------------------------------------------------------------

    def _render(self) -> Group:
        bar = ProgressBar(total=max(1, len(self.jobs)), completed=self.done, width=30)
        return Group(bar, Text(self.line(), no_wrap=True, overflow="ellipsis"))

    def _tick(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.console.print(self.line(), markup=False, highlight=False, soft_wrap=True)

    def __enter__(self) -> RunProgress:
        if self.live:
            self._display = Live(
                get_renderable=self._render,
                console=self.console,
                transient=True,
                refresh_per_second=4,
            )
            self._display.start()
        else:
            self._ticker = threading.Thread(target=self._tick, name="run-progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._display is not None:
            self._display.stop()
        if self._ticker is not None:
            self._ticker.join(timeout=5)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def plan_summary(jobs: Sequence[Job], listed: int = 8) -> str:
    """``12 jobs of 1 definition (rmsnorm_h4096: 3 solutions x 4 workloads)``; past ``listed``
    definitions, how many more."""
    per_definition: dict[str, tuple[set[str], set[str], list[int]]] = {}
    for job in jobs:
        solutions, workloads, count = per_definition.setdefault(
            job.definition.name, (set(), set(), [0])
        )
        solutions.add(job.solution.name)
        workloads.add(job.workload.uuid)
        count[0] += 1
    parts = []
    for name, (solutions, workloads, count) in per_definition.items():
        if count[0] == len(solutions) * len(workloads):
            what = f"{_plural(len(solutions), 'solution')} x {_plural(len(workloads), 'workload')}"
        else:
            what = _plural(count[0], "job")
        parts.append(f"{name}: {what}")
    if len(parts) > listed:
        parts = [*parts[:listed], f"and {len(parts) - listed} more"]
    listing = f" ({'; '.join(parts)})" if parts else ""
    return f"{_plural(len(jobs), 'job')} of {_plural(len(per_definition), 'definition')}{listing}"
