"""Which of a run's jobs the local executor may hand out: those whose solution is built.

One build pool (``build_pool``) for all of the executor's devices compiles every CUDA and C++
solution of the run in parallel while the workers evaluate; Python and Triton solutions are ready
at once. A job whose build failed gets the build's verdict, a compile error with the compiler's
log, and one whose solution cannot be built here (a dependency missing) is skipped, without a
worker.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kernelarena.evaluate.executors.jobs import JobResult

if TYPE_CHECKING:
    from kernelarena.evaluate.executors.build_pool import BuildPool
    from kernelarena.evaluate.executors.build_pool import Key as BuildKey
    from kernelarena.evaluate.executors.jobs import Job


class BuildGate:
    """The executor's builds: ``build_pool`` True, a pool made for each run
    (``KERNELARENA_BUILD_POOL=0`` turns it off); a pool of the caller's, used as it is (and
    closed with the executor); False, the sandboxes build, each before its solution's first
    job."""

    def __init__(self, build_pool: BuildPool | bool, timeout_s: float, devices: Sequence[str]):
        if build_pool is True and os.environ.get("KERNELARENA_BUILD_POOL") == "0":
            build_pool = False
        self._wanted = build_pool is not False
        self.pool: BuildPool | None = None if isinstance(build_pool, bool) else build_pool
        self._owns_pool = self.pool is None
        self._timeout_s = timeout_s
        self._devices = list(devices)
        self._keys: dict[int, BuildKey | None] = {}  # each job's build in the pool
        self._settled_at = -1  # builds over when the queue was last settled
        self.summary: dict[str, Any] = {}  # the last run's pool (``BuildPool.summary``)

    def prepare(self) -> None:
        """What ``start`` would otherwise do first, done while the workers import torch: the
        pool's modules (50 ms of imports) and the GPUs' architecture (an nvidia-smi), which the
        run's first job would wait for after its judge is ready."""
        if not self._wanted:
            return
        from kernelarena.evaluate.executors import build_pool  # noqa: F401
        from kernelarena.evaluate.executors.build_targets import build_target

        for device in dict.fromkeys(self._devices):
            build_target(device)

    def start(self, jobs: Sequence[Job]) -> BuildPool | None:
        """The pool, given every build the jobs need in the order of the jobs (so that the first
        jobs' solutions are built first); None without a pool or without anything to build. The
        devices share one pool and one target (a host's GPUs are of one architecture; where
        they are not, or it cannot be told, the sandboxes build, as without a pool)."""
        from kernelarena.evaluate.executors.build_pool import BuildPool
        from kernelarena.evaluate.executors.build_targets import build_target, pooled

        self._keys, self._settled_at = {}, -1
        if not self._wanted or not any(pooled(job.solution) for job in jobs):
            return None
        targets = {build_target(device) for device in self._devices}
        target = targets.pop() if len(targets) == 1 else None
        if target is None:
            return None
        if self.pool is None:
            self.pool = BuildPool(timeout_s=self._timeout_s, devices=len(self._devices))
        pool = self.pool
        for job in jobs:
            self._keys[job.id] = pool.submit(job.definition, job.solution, target)
        return pool

    def ready(self, job: Job) -> bool:
        return self.pool is None or self.pool.ready(self._keys.get(job.id))

    def settle(
        self,
        queue: deque[Job],
        device: str,
        environment: dict[str, Any],
        on_result: Callable[[Job, JobResult], None],
    ) -> None:
        """Where builds ended since the last call: the queued jobs whose build failed get the
        build's verdict and those whose solution cannot be built here are skipped, each reported
        from ``device`` (whose ``environment`` the traces carry) and taken off ``queue``."""
        from kernelarena.data import Environment, Status

        if self.pool is None or self.pool.finished() == self._settled_at:
            return
        self._settled_at = self.pool.finished()
        for job in list(queue):
            outcome = self.pool.outcome(self._keys.get(job.id))
            if outcome is None or outcome.status not in ("failed", "skipped"):
                continue
            queue.remove(job)
            if outcome.status == "skipped":
                on_result(job, JobResult(skipped=outcome.detail, device=device))
                continue
            described = Environment.model_validate(environment)
            trace = job.make_trace(described, Status.COMPILE_ERROR, outcome.detail)
            on_result(job, JobResult(trace=trace, device=device))

    def end_run(self, pool: BuildPool | None) -> None:
        """After a run: its pool's summary kept, and a pool made for the run closed."""
        if pool is None:
            return
        self.summary = pool.summary()
        if self._owns_pool:
            pool.close()
            self.pool = None

    def close(self) -> None:
        """A pool of the caller's closed (the executor closes)."""
        if self.pool is not None and not self._owns_pool:
            self.pool.close()
            self.pool = None
