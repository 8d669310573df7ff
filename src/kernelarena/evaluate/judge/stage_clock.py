"""Where a job's wall time goes in the judge, stage by stage: cheap enough to be always on.

A judge runs one job at a time on one thread, so one clock per process (``JOB_STAGES``) is enough.
A job moves through phases in order (``switch``): ``decode`` (the job's models), ``sandbox_start``
(the sandbox serving its solution, started or reused), ``build``, ``checks`` (the correctness
trials), ``timing`` (the sandbox's timed calls, the judge's clocks and the checks after them),
``finish`` (the trace) and ``reply`` (the result back to the executor). Inside a phase, nested stages (``stage``, ``staged``:
a request to the sandbox, the judge's clocks) take their time out of the stage around them, so
every second of the job is counted once and a job's stages add up to its wall time in the judge.
A stage is named by its path: ``timing/judge_clocks/sandbox:eager`` is the time the judge's clocks
waited for the sandbox's eager calls.

Marks are ``time.perf_counter`` reads, two per stage: microseconds per job, against the hundreds
of milliseconds a job takes. Outside a job (a test calling a judge clock directly) the clock is
off and a mark costs one attribute read.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

Function = TypeVar("Function", bound=Callable[..., Any])


class StageClock:
    def __init__(self) -> None:
        self.running = False
        self._seconds: dict[str, float] = {}
        self._path: list[str] = []  # the phase, then the nested stages open in it
        self._since = 0.0

    def begin(self, phase: str) -> None:
        """A new job, in ``phase``; whatever the last one left is dropped."""
        self._seconds = {}
        self._path = [phase]
        self._since = time.perf_counter()
        self.running = True

    def switch(self, phase: str) -> None:
        """The job is in ``phase`` from now on (nested stages still open keep their places)."""
        if self.running:
            self._charge()
            self._path[0] = phase

    def stage(self, name: str) -> _Stage:
        """A nested stage: its time is taken out of the stage around it. Inside a stage of the
        same name (a judge's clock that takes a second look through itself) it is that stage."""
        return _Stage(self, name)

    def _enter(self, name: str) -> int:
        """The depth of the stage opened, or 0 for none (the clock is off, or in that stage)."""
        if not self.running or self._path[-1] == name:
            return 0
        self._charge()
        self._path.append(name)
        return len(self._path)

    def _exit(self, depth: int) -> None:
        # A job taken while this stage was open (``take`` from a failure path) ended it.
        if depth and self.running and len(self._path) == depth:
            self._charge()
            self._path.pop()

    def take(self) -> dict[str, float]:
        """The job's seconds by stage path, and the clock off until the next ``begin``."""
        if not self.running:
            return {}
        self._charge()
        self.running = False
        return {path: round(seconds, 6) for path, seconds in self._seconds.items()}

    def _charge(self) -> None:
        now = time.perf_counter()
        path = "/".join(self._path)
        self._seconds[path] = self._seconds.get(path, 0.0) + now - self._since
        self._since = now


class _Stage:
    """``StageClock.stage``: a class rather than a generator, a few times cheaper a mark."""

    __slots__ = ("_clock", "_depth", "_name")

    def __init__(self, clock: StageClock, name: str) -> None:
        self._clock, self._name, self._depth = clock, name, 0

    def __enter__(self) -> None:
        self._depth = self._clock._enter(self._name)

    def __exit__(self, *exc: object) -> None:
        self._clock._exit(self._depth)


JOB_STAGES = StageClock()


def staged(name: str) -> Callable[[Function], Function]:
    """A function whose calls are the nested stage ``name`` of the judge's job."""

    def decorate(function: Function) -> Function:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with JOB_STAGES.stage(name):
                return function(*args, **kwargs)

        return timed  # type: ignore[return-value]

    return decorate


def phase(name: str, then: str) -> Callable[[Function], Function]:
    """A function whose calls are the phase ``name`` of the judge's job, followed by ``then``."""

    def decorate(function: Function) -> Function:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            JOB_STAGES.switch(name)
            try:
                return function(*args, **kwargs)
            finally:
                JOB_STAGES.switch(then)

        return timed  # type: ignore[return-value]

    return decorate
