"""A job (one solution on one workload), its result, their wire format (JSON-ready dicts, for a
worker process or a Ray actor), the time limits around a job, and which job a free worker takes.
``Job`` itself is defined in ``evaluate.options``, below the wings, since the judge takes one too;
it is re-exported here."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernelarena.evaluate.options import Job as Job  # re-exported

if TYPE_CHECKING:  # the command line starts its workers before it builds the schemas
    from kernelarena.data import Trace


@dataclass(frozen=True)
class Timeouts:
    build_s: float = 900.0
    run_s: float = 300.0
    startup_s: float = 600.0


@dataclass
class JobResult:
    """``stages``: where the job's wall time went, in seconds by stage (``stage_clock``: the
    judge's phases and the stages nested in them, which add up to its time in the judge;
    ``idle``, the judge's wait for it; ``parent:*``, the executor's share); empty where no judge
    evaluated it (a build's failure, a lost worker)."""

    trace: Trace | None = None
    skipped: str | None = None
    device: str = ""
    stages: dict[str, float] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        trace = self.trace.to_json_dict() if self.trace is not None else None
        return {"trace": trace, "skipped": self.skipped, "stages": self.stages}

    @classmethod
    def from_payload(cls, payload: dict[str, Any], device: str) -> JobResult:
        """The inverse of ``payload``, from ``device``."""
        from kernelarena.data import Trace

        trace = Trace.model_validate(payload["trace"]) if payload["trace"] else None
        stages = dict(payload.get("stages") or {})
        return cls(trace=trace, skipped=payload["skipped"], device=device, stages=stages)


def take_job(
    queue: deque[Job], own: str | None, others: set[str], ready: Callable[[Job], bool]
) -> Job | None:
    """Remove and return the next job for a free worker whose sandbox serves the solution
    ``own``, among the ``ready`` ones: of ``own``, else of a solution not in ``others`` (those
    the other busy workers are on), else of one of those (the run's last solutions, shared);
    None when none is ready. A solution new to a worker costs it a sandbox start (on a GPU, a
    spare that replaces it starts, seconds of a core's time). In first-come order every worker took a
    share of every solution's jobs, so each started a sandbox for every solution of the run
    (two workers on a CPU: 6 sandboxes for 3 solutions, where one worker started 3)."""
    mine = unserved = shared = None
    for index, job in enumerate(queue):
        if not ready(job):
            continue
        name = job.solution.name
        if name == own:
            mine = index
            break
        if name not in others:
            unserved = index if unserved is None else unserved
        elif shared is None:
            shared = index
    chosen = next((i for i in (mine, unserved, shared) if i is not None), None)
    if chosen is None:
        return None
    job = queue[chosen]
    del queue[chosen]
    return job
