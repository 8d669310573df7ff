"""One GPU shared by several judges of a run (``KERNELARENA_JUDGES_PER_GPU``): what measures holds
the GPU alone, what only checks shares it.

A judge holds its GPU's lock shared while it checks a job (the sets, the reference's outputs, the
solution's checked calls), so that several judges' checks overlap, and alone while it measures: the
solution's first call of a job (an autotuner times its configurations there), the timing phase
(the sandbox's timed calls, the judge's clocks, the reference's timing) and the ceilings. Builds
and sandbox start-ups hold nothing. The lock is an ``flock`` on a file the executor makes for the
GPU and names to each of its judges; the kernel releases it with the process that held it. One
judge a GPU (the default) takes no lock at all (``NO_LOCK``).

A solution that leaves work running on the GPU after its requests (its own stream, never waited
for) can still slow a neighbour's measurement; with one judge a GPU there is no neighbour.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from kernelarena.evaluate.judge.stage_clock import JOB_STAGES


class DeviceLock:
    """The GPU's lock as one holder sees it (each thread that takes it needs a lock of its own:
    ``flock`` belongs to the open file, which threads would share). Nested sections take nothing
    more than they need: shared inside exclusive is exclusive, and an exclusive section inside a
    shared one goes back to shared when it ends."""

    def __init__(self, path: str | Path, clocked: bool = True) -> None:
        """``clocked``: waits count as the job's ``gpu_lock`` stage; only the judge's own thread
        may say so (the stage clock is one thread's), not its warm-up's."""
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._held = fcntl.LOCK_UN
        self._clocked = clocked

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        if self._held != fcntl.LOCK_UN:
            yield
            return
        self._take(fcntl.LOCK_SH)
        try:
            yield
        finally:
            self._take(fcntl.LOCK_UN)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        before = self._held
        if before == fcntl.LOCK_EX:
            yield
            return
        # From shared, flock lets go before it waits: no two holders wait on each other.
        self._take(fcntl.LOCK_EX)
        try:
            yield
        finally:
            self._take(before)

    def _take(self, how: int) -> None:
        # A wait for another judge shows in the stage table.
        with JOB_STAGES.stage("gpu_lock") if self._clocked else contextlib.nullcontext():
            fcntl.flock(self._fd, how)
        self._held = how

    def close(self) -> None:
        os.close(self._fd)


class _NoLock:
    """One judge a GPU: nothing to take."""

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        yield

    exclusive = shared

    def close(self) -> None:
        pass


NO_LOCK = _NoLock()
Lock = DeviceLock | _NoLock
