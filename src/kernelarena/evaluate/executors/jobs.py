"""A job (one solution on one workload), its result, their wire format (JSON-ready dicts, for a
worker process or a Ray actor), the time limits around a job, and which job a free worker takes.
``Job`` itself is defined in ``evaluate.options``, below the wings, since the judge takes one too;
it is re-exported here."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable
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


# A worker's first job on a workload draws its inputs, asks its reference for their outputs and
# times the reference (kept for the worker's later jobs on it: ``kept_draws``); a solution new to a
# worker costs a sandbox start. On a host with four H200s (2026-11-28), the first cost ~0.26 s a
# workload, the second ~0.4 s a solution.
SANDBOX_START_IN_WORKLOAD_VISITS = 1.5


def by_solution(
    queue: deque[Job], own: str | None, others: set[str], ready: Callable[[Job], bool]
) -> int | None:
    """Where in ``queue`` the next job is for a free worker whose sandbox serves the solution
    ``own``, among the ``ready`` ones: of ``own``, else of a solution not in ``others`` (those
    the other busy workers are on), else of one of those (the run's last solutions, shared);
    None when none is ready. A solution new to a worker costs it a sandbox start (on a GPU, a
    spare that replaces it starts, seconds of a core's time). In first-come order every worker took a
    share of every solution's jobs, so each started a sandbox for every solution of the run
    (two workers on a CPU: 6 sandboxes for 3 solutions, where one worker started 3)."""
    unserved = shared = None
    for index, job in enumerate(queue):
        if not ready(job):
            continue
        name = job.solution.name
        if name == own:
            return index
        if name not in others:
            unserved = index if unserved is None else unserved
        elif shared is None:
            shared = index
    return unserved if unserved is not None else shared


def _removed(queue: deque[Job], index: int) -> Job:
    job = queue[index]
    del queue[index]
    return job


WorkloadKey = tuple[str, str]


def workload_key(job: Job) -> WorkloadKey:
    return job.definition.name, job.workload.uuid


class JobTaker:
    """Which job a free worker takes next, where several workers share a run.

    Within a definition of many workloads and few solutions, the workers split the workloads
    between them: each worker keeps to the workloads it has judged (or no worker has), taking
    another solution's jobs on them before its own solution's on a workload another worker has,
    so that each workload's inputs, reference outputs and reference timing are made by one
    worker. With one worker per solution instead (``by_solution``), every worker made them for
    every workload: on four GPUs, twice the draws and reference requests of one GPU, and the
    job's judge 1.5x as long. Where solutions are many and workloads few (a published dataset),
    the sandboxes a split would add cost more than the draws it saves, and ``by_solution``'s
    order holds: a definition is split where its workloads outnumber its solutions by more than
    ``SANDBOX_START_IN_WORKLOAD_VISITS``."""

    def __init__(self, jobs: Iterable[Job]) -> None:
        workloads: dict[str, set[str]] = {}
        solutions: dict[str, set[str]] = {}
        for job in jobs:
            workloads.setdefault(job.definition.name, set()).add(job.workload.uuid)
            solutions.setdefault(job.definition.name, set()).add(job.solution.name)
        self.split = {
            name
            for name, found in workloads.items()
            if len(found) > SANDBOX_START_IN_WORKLOAD_VISITS * len(solutions[name])
        }
        self._visits: dict[WorkloadKey, set[int]] = {}  # workload -> the workers that judged it

    def take(
        self,
        queue: deque[Job],
        worker: int,
        own: str | None,
        others: set[str],
        ready: Callable[[Job], bool],
    ) -> Job | None:
        """The next job (removed from ``queue``) for the free worker ``worker`` whose sandbox
        serves ``own``, among the ``ready`` ones; None where none is. Its own solution's next
        job, in a split definition only on a workload of its own (one it judged, or one no
        worker has); else another solution's with the most jobs on such workloads (preferring
        one no other worker is on; not for a single job while its own solution has others);
        else ``by_solution``'s choice."""
        free = [i for i, job in enumerate(queue) if self._free(job, worker) and ready(job)]
        # Its own solution's next job: on a workload of its own, or anywhere where the
        # definition (every job of a solution is of one definition) is not split.
        chosen = next(
            (
                i
                for i, job in enumerate(queue)
                if job.solution.name == own
                and (job.definition.name not in self.split or self._free(job, worker))
                and ready(job)
            ),
            None,
        )
        if chosen is None:
            fallback = by_solution(queue, own, others, ready)
            chosen = fallback
            if free:
                counts = Counter(queue[i].solution.name for i in free)
                best = max(counts, key=lambda name: (counts[name], name not in others))
                # One job is not worth a sandbox where the worker's own solution has others.
                own_left = fallback is not None and queue[fallback].solution.name == own
                if counts[best] >= SANDBOX_START_IN_WORKLOAD_VISITS or not own_left:
                    chosen = next(i for i in free if queue[i].solution.name == best)
        if chosen is None:
            return None
        job = _removed(queue, chosen)
        self._visits.setdefault(workload_key(job), set()).add(worker)
        return job

    def _free(self, job: Job, worker: int) -> bool:
        """A job of a split definition on a workload ``worker`` has judged, or no worker has."""
        seen = self._visits.get(workload_key(job))
        return job.definition.name in self.split and (seen is None or worker in seen)
