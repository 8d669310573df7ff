"""The Python API the seeds show: ``Benchmark(trace_set).run_all()`` returning traces."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

from kernelarena.data import Trace, TraceSet
from kernelarena.evaluate.executors.devices import resolve_devices
from kernelarena.evaluate.executors.jobs import Timeouts
from kernelarena.evaluate.executors.local import LocalExecutor
from kernelarena.evaluate.executors.runner import RunSummary, plan, run_jobs
from kernelarena.evaluate.options import (
    REFERENCES_UNCONFINED,
    Options,
    references_sandboxed,
    within_job_time,
)
from kernelarena.registry import add_registered


class Benchmark:
    """Evaluate every (solution, workload) of a TraceSet in worker processes.

    Traces are added to ``trace_set`` (and appended to its folder, when it has one) as they arrive.
    Solutions registered with ``kernelarena.register`` for its definitions are included.
    """

    def __init__(
        self,
        trace_set: TraceSet,
        *,
        devices: str | Sequence[str] | None = None,
        options: Options | None = None,
        timeouts: Timeouts | None = None,
    ) -> None:
        self.trace_set = trace_set
        self.devices = (
            resolve_devices(devices)
            if devices is None or isinstance(devices, str)
            else list(devices)
        )
        self.timeouts = timeouts or Timeouts()
        self.options = within_job_time(options or Options(), self.timeouts.run_s)
        self.summary: RunSummary | None = None

    def run_all(
        self,
        names: Sequence[str] | None = None,
        solutions: Sequence[str] | None = None,
        suite: str = "all",
        resume: bool = False,
    ) -> list[Trace]:
        add_registered(self.trace_set)
        if not references_sandboxed() and os.environ.get("KERNELARENA_UNCONFINED") != "1":
            warnings.warn(REFERENCES_UNCONFINED, stacklevel=2)
        on_gpu = any(d.startswith("cuda") for d in self.devices)
        jobs = plan(self.trace_set, names, solutions, suite, on_gpu, self.options)
        executor = LocalExecutor(self.devices, self.timeouts)
        try:
            self.summary = run_jobs(jobs, executor, self.trace_set, resume=resume)
        finally:
            executor.close()
        return self.summary.traces
