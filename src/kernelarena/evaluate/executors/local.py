"""The local executor: one persistent worker process per device, jobs handed to whichever is free.

Builds go ahead of the jobs (``build_gate``): a worker takes only jobs whose solution is built, and a
job whose build failed gets the build's verdict, a compile error with the compiler's log, without a
worker.

Containment lives here. A worker that dies (segfault, abort, ``os._exit``) or overruns its job's time
limit is killed and replaced; its job becomes a RUNTIME_ERROR or TIMEOUT trace with the tail of what the
worker printed. The run goes on.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelarena.evaluate.executors.build_gate import BuildGate
from kernelarena.evaluate.executors.jobs import JobResult, JobTaker, Timeouts
from kernelarena.evaluate.executors.leftovers import mark_owner, sweep
from kernelarena.evaluate.executors.worker_process import (
    WorkerProcess,
    answered,
    death_note,
    said_closed,
)
from kernelarena.evaluate.messages import Message
from kernelarena.evaluate.options import judges_per_gpu as judges_per_gpu_wanted
from kernelarena.evaluate.process_output import read_tail
from kernelarena.evaluate.sandbox.bytecode import with_bytecode

if TYPE_CHECKING:
    from kernelarena.data import Status
    from kernelarena.evaluate.executors.build_pool import BuildPool
    from kernelarena.evaluate.executors.jobs import Job


@dataclass
class _Worker:
    device: str
    process: Any
    conn: Connection
    log_path: str
    environment: dict[str, Any] = field(default_factory=dict)
    job: Job | None = None
    deadline: float = 0.0
    stage: str = "idle"
    spawned_at: float = 0.0
    startup: dict[str, Any] = field(default_factory=dict)
    solution: str | None = None  # of its last job: the one its sandbox serves
    free_since: float | None = None  # time.monotonic() since it waits for a build to end
    stages: dict[str, float] = field(default_factory=dict)  # its job's, measured here


class LocalExecutor:
    def __init__(
        self,
        devices: Sequence[str],
        timeouts: Timeouts | None = None,
        log_dir: str | Path | None = None,
        measure_ceilings: bool = True,
        build_pool: BuildPool | bool = True,
        judges_per_gpu: int | None = None,
    ) -> None:
        """``build_pool``: True, a pool made for each ``run`` (``KERNELARENA_BUILD_POOL=0``
        turns it off); a pool of the caller's, used as it is (and closed with the executor);
        False, the sandboxes build, each before its solution's first job. ``judges_per_gpu``
        (default ``KERNELARENA_JUDGES_PER_GPU``, else 1): workers on each GPU, which then check
        side by side and measure one at a time (``judge.device_lock``)."""
        if not devices:
            raise ValueError("devices: at least one device is needed")
        self.judges_per_gpu = judges_per_gpu or judges_per_gpu_wanted()
        self.devices = [
            device
            for device in devices
            for _ in range(self.judges_per_gpu if device.startswith("cuda") else 1)
        ]
        self.timeouts = timeouts or Timeouts()
        self._owns_log_dir = log_dir is None
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="kernelarena-workers-"))
        if self._owns_log_dir:
            mark_owner(self.log_dir)
        self.measure_ceilings = measure_ceilings
        self._workers: list[_Worker] = []
        self._pending: list[_Worker] = []
        self._spawned = 0
        self._queue: deque[Job] = deque()  # the jobs ``run`` has not handed out yet
        self._taker = JobTaker(())
        self._builds = BuildGate(build_pool, self.timeouts.build_s, self.devices)

    @property
    def build_summary(self) -> dict[str, Any]:
        """The last run's build pool (``BuildPool.summary``)."""
        return self._builds.summary

    # -- lifecycle ------------------------------------------------------------------------------

    def launch(self) -> None:
        """Spawn the workers without waiting for them (they take seconds to import torch)."""
        if not self._workers and not self._pending:
            self._pending = [self._spawn(device) for device in self.devices]
            sweep()  # what killed runs left behind, while the workers import torch

    def start(self) -> list[dict[str, Any]]:
        """Start one worker per device; return each device's environment (hardware, ceilings) and,
        under ``startup``, where its start-up time went (see ``worker.describe_startup``). The
        traces carry the environment without it."""
        if not self._workers:
            self.launch()
            self._builds.prepare()
            pending, self._pending = self._pending, []
            self._workers = [self._await_ready(worker) for worker in pending]
        return [dict(w.environment, startup=w.startup) for w in self._workers]

    def close(self) -> None:
        self._builds.close()
        for worker in self._pending:
            worker.process.kill()
        self._pending = []
        for worker in self._workers:
            with contextlib.suppress(OSError, BrokenPipeError):
                worker.conn.send((Message.STOP,))
        for worker in self._workers:
            if said_closed(worker.conn, worker.process, timeout=10):
                # Its sandboxes are gone and its log is flushed; what is left is the kernel's
                # teardown of its CUDA context (0.3-0.4 s on an H100), which need not hold up the
                # caller.
                worker.process.reap_in_background()
            else:
                worker.process.kill()
                worker.process.join()
        self._workers = []
        self._remove_folders()

    def _remove_folders(self) -> None:
        """The workers' logs (their content is in the traces) and the sandboxes' temporary
        folders inside. (The arena has no name to remove: ``arena``.)"""
        if self._owns_log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> LocalExecutor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, device: str) -> _Worker:
        self._spawned += 1
        log_path = str(self.log_dir / f"worker-{device.replace(':', '')}-{self._spawned}.log")
        # A fresh interpreter, not multiprocessing's spawn: spawn re-imports the caller's __main__,
        # which breaks scripts without an ``if __name__ == "__main__"`` guard.
        parent, child = multiprocessing.Pipe()
        command = self._command(device, child.fileno(), log_path)
        environment = with_bytecode(
            dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)), writes=True
        )
        spawned_at = time.time()
        process = subprocess.Popen(
            command,
            pass_fds=(child.fileno(),),
            env=environment,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        child.close()
        return _Worker(device, WorkerProcess(process), parent, log_path, spawned_at=spawned_at)

    def _command(self, device: str, fd: int, log_path: str) -> list[str]:
        """The worker's command line; with several judges a GPU, the file of the GPU's lock."""
        worker = "kernelarena.evaluate.judge.worker"
        command = [sys.executable, "-m", worker, str(fd), device, log_path]
        if not self.measure_ceilings:
            command.append("--no-ceilings")
        if self.judges_per_gpu > 1 and device.startswith("cuda"):
            command += ["--gpu-lock", str(self.log_dir / f"gpu-{device.replace(':', '')}.lock")]
        return command

    def _await_ready(self, worker: _Worker) -> _Worker:
        if not answered(worker.conn, worker.process, self.timeouts.startup_s):
            tail = read_tail(worker.log_path)
            worker.process.kill()
            raise RuntimeError(
                f"worker for {worker.device} did not start in {self.timeouts.startup_s} s:\n{tail}"
            )
        try:
            kind, environment, startup = worker.conn.recv()
        except EOFError:
            raise RuntimeError(
                f"worker for {worker.device} died while starting:\n{read_tail(worker.log_path)}"
            ) from None
        assert kind == Message.READY
        worker.environment = environment
        # Both clocks are this host's wall clock: the interpreter's start and the whole start-up.
        worker.startup = {
            "spawned_at": round(worker.spawned_at, 4),
            "total_s": round(startup["ready_at"] - worker.spawned_at, 4),
            "python_s": round(startup["entered_at"] - worker.spawned_at, 4),
            "phases_s": startup["phases_s"],
        }
        return worker

    def _replace(self, worker: _Worker) -> None:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(timeout=30)
        fresh = self._await_ready(self._spawn(worker.device))
        fresh.environment = fresh.environment or worker.environment
        self._workers[self._workers.index(worker)] = fresh

    # -- running --------------------------------------------------------------------------------

    def run(self, jobs: Sequence[Job], on_result: Callable[[Job, JobResult], None]) -> None:
        self.start()
        self._queue, self._taker = deque(jobs), JobTaker(jobs)
        pool = self._builds.start(jobs)
        try:
            while self._queue or any(w.job is not None for w in self._workers):
                first = self._workers[0]
                self._builds.settle(self._queue, first.device, first.environment, on_result)
                for worker in self._workers:
                    if worker.job is None:
                        job = self._take(worker)
                        if job is not None:
                            self._submit(worker, job)
                        elif self._queue and worker.free_since is None:
                            worker.free_since = time.monotonic()  # every queued job is unbuilt
                busy = [w for w in self._workers if w.job is not None]
                waitables: list[Any] = [w.conn for w in busy]
                timeout = 1.0
                if busy:
                    timeout = min(min(w.deadline for w in busy) - time.monotonic(), 1.0)
                if pool is not None and pool.pending():
                    waitables.append(pool.fileno())  # a build that finishes frees jobs
                elif not busy:
                    continue  # what is left is settled above
                ready = wait(waitables, timeout=max(0.0, timeout))
                if pool is not None:
                    pool.drain()
                for worker in busy:
                    self._service(worker, ready, on_result)
        finally:
            self._builds.end_run(pool)

    def _take(self, worker: _Worker) -> Job | None:
        """The worker's next job among those whose solution is built (``jobs.JobTaker``)."""
        others = {w.solution for w in self._workers if w is not worker and w.job is not None}
        elsewhere = {o for o in others if o}
        return self._taker.take(
            self._queue, id(worker), worker.solution, elsewhere, self._builds.ready
        )

    def _submit(self, worker: _Worker, job: Job) -> None:
        worker.stages = {}
        if worker.free_since is not None:
            worker.stages["parent:build_wait"] = round(time.monotonic() - worker.free_since, 6)
            worker.free_since = None
        worker.job = job
        worker.solution = job.solution.name
        worker.stage = "building"
        worker.deadline = time.monotonic() + self.timeouts.build_s
        worker.conn.send((Message.JOB, job.id, job.payload()))

    def _service(
        self, worker: _Worker, ready: list[Any], on_result: Callable[[Job, JobResult], None]
    ) -> None:
        # Here, not at the top: the command line launches workers before it builds the schemas.
        from kernelarena.data import Status

        job = worker.job
        assert job is not None
        if worker.conn in ready:
            try:
                while worker.conn.poll():
                    message = worker.conn.recv()
                    if message[0] == Message.STAGE:
                        worker.stage = message[2]
                        worker.deadline = time.monotonic() + self.timeouts.run_s
                    elif message[0] == Message.RESULT:
                        self._received(worker, job, message[2], on_result)
                        return
            except (EOFError, OSError):
                pass  # the worker died mid-message: handled below
        if not worker.process.is_alive():
            worker.process.join(timeout=5)
            log = death_note(worker.process.exitcode) + "\n" + read_tail(worker.log_path)
            self._fail(worker, job, Status.RUNTIME_ERROR, log, on_result)
        elif time.monotonic() > worker.deadline:
            limit = self.timeouts.build_s if worker.stage == "building" else self.timeouts.run_s
            log = (
                f"{worker.stage} took longer than {limit:g} s; the worker was killed\n"
                + read_tail(worker.log_path)
            )
            status = Status.COMPILE_ERROR if worker.stage == "building" else Status.TIMEOUT
            self._fail(worker, job, status, log, on_result)

    def _received(
        self,
        worker: _Worker,
        job: Job,
        outcome: dict[str, Any],
        on_result: Callable[[Job, JobResult], None],
    ) -> None:
        """A worker's result: the worker gets its next job before this one's trace is recorded."""
        from kernelarena.data import Environment, Status

        received = time.monotonic()
        worker.job = None
        parent = dict(worker.stages)
        if "sent_at" in outcome:  # the parent's latency, the pipe and the pickling
            parent["parent:delivery"] = round(received - outcome["sent_at"], 6)
        if "internal_error" in outcome:
            log = "kernelarena internal error while evaluating:\n" + outcome["internal_error"]
            environment = Environment.model_validate(worker.environment)
            failure = job.make_trace(environment, Status.RUNTIME_ERROR, log)
            stages = {**outcome.get("stages", {}), **parent}
            on_result(job, JobResult(trace=failure, device=worker.device, stages=stages))
            return
        result = JobResult.from_payload(outcome, worker.device)
        following = self._take(worker) if not outcome["fatal"] else None
        if following is not None:
            self._submit(worker, following)
        result.stages.update(parent, **{"parent:decode": round(time.monotonic() - received, 6)})
        on_result(job, result)
        if outcome["fatal"]:
            self._replace(worker)

    def _fail(
        self,
        worker: _Worker,
        job: Job,
        status: Status,
        log: str,
        on_result: Callable[[Job, JobResult], None],
    ) -> None:
        from kernelarena.data import Environment

        environment = Environment.model_validate(worker.environment)
        worker.job = None
        self._replace(worker)
        on_result(
            job, JobResult(trace=job.make_trace(environment, status, log), device=worker.device)
        )
