"""The build pool: every compiled solution a run needs, built ahead, in parallel, confined.

What takes time to build is compiled code (CUDA and C++: nvcc, the host compiler on
``torch/extension.h``); Python and Triton solutions are only written and imported, which their
sandbox does in a moment, so the pool takes CUDA and C++ solutions and calls the others ready.
Each build runs in a process of its own (``build_process``) behind the walls of a sandbox
(``isolation.walled``: namespaces, a minimal file-system view; inside, ``confine.confine_sandbox``
and the solution's cache namespace, ``solution_caches.enter``), so it writes the artifact where
the solution's sandbox will look for it: the sandbox's own build is then a cache hit. A build
that fails leaves its error in the build cache (``compile.cache``), so the next run reports it
without compiling.

How many at once (``build_targets.pool_slots``): one build per core the judges leave free (a
judge and its sandbox keep a core each, per device), and no more than the memory available holds
at ``BUILD_BYTES`` each; each build compiles one file at a time (``MAX_JOBS=1``) at a lower CPU
priority than the judges and sandboxes (``NICENESS``). ``KERNELARENA_BUILD_SLOTS`` sets it.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kernelarena.compile.base import first_error
from kernelarena.data import Definition, Solution
from kernelarena.evaluate.executors.build_targets import build_target, pool_slots, pooled

NICENESS = 10  # builds yield the cores to the judges and sandboxes around them
REPLY_LIMIT = 1 << 20

BuildStatus = Literal["built", "failed", "skipped", "unbuilt"]
Key = tuple[str, str, str]  # the definition's and solution's content hashes, the target


@dataclass(frozen=True)
class BuildOutcome:
    """``built`` (``detail``: the artifact), ``failed`` (the build's log: the job's verdict is a
    compile error), ``skipped`` (why: a dependency missing here), or ``unbuilt``: the build's
    process gave no answer (it crashed), so the solution's sandbox builds it as without a pool."""

    status: BuildStatus
    detail: str
    first_error: str = ""
    cached: bool = False  # a failure read from the build cache, not compiled again
    started: float = 0.0  # time.monotonic() when its process started
    seconds: float = 0.0

    @property
    def brief(self) -> str:
        """One line: the compiler's first error, the reason for a skip, or the artifact."""
        if self.status == "failed":
            return self.first_error + (" (cached: failed before)" if self.cached else "")
        return self.detail.strip().splitlines()[0] if self.detail.strip() else ""


@dataclass(frozen=True)
class _Request:
    key: Key
    definition: Definition
    solution: Solution
    target: str


class BuildPool:
    """Builds submitted solutions in up to ``slots`` confined processes at once.

    ``namespaced``: each build lands in its solution's own cache (``solution_caches``), where
    its sandbox looks during a run; else in the trusted build cache (``kernelarena build``, for
    apply). ``fileno`` becomes readable whenever a build finishes, so an executor can wait for
    its workers and the pool together (``drain`` empties it)."""

    def __init__(
        self,
        slots: int | None = None,
        *,
        namespaced: bool = True,
        timeout_s: float = 900.0,
        devices: int = 1,
    ) -> None:
        self.slots = slots or pool_slots(devices)
        self.namespaced = namespaced
        self.timeout_s = timeout_s
        self.folder = Path(tempfile.mkdtemp(prefix="kernelarena-builds-"))
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._outcomes: dict[Key, BuildOutcome] = {}
        self._submitted: dict[Key, _Request] = {}
        self._running: dict[Key, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._finished = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        self._closed = False
        self._began: float | None = None

    # -- asking -----------------------------------------------------------------------------------

    def submit(self, definition: Definition, solution: Solution, target: str | None) -> Key | None:
        """Queue a build (once per solution and target) and return its key; None when there is
        nothing to build (``target`` None, or a language the pool leaves to the sandbox)."""
        if target is None or not pooled(solution):
            return None
        key = (definition.content_hash(), solution.content_hash(), target)
        with self._lock:
            if key in self._submitted or self._closed:
                return key
            self._submitted[key] = request = _Request(key, definition, solution, target)
            if self._began is None:
                self._began = time.monotonic()
            if len(self._threads) < self.slots:
                thread = threading.Thread(target=self._serve, name="build-pool", daemon=True)
                self._threads.append(thread)
                thread.start()
        self._queue.put(request)
        return key

    def outcome(self, key: Key | None) -> BuildOutcome | None:
        """The finished build's outcome; None while it is queued or building, or for no key."""
        if key is None:
            return None
        with self._lock:
            return self._outcomes.get(key)

    def ready(self, key: Key | None) -> bool:
        """Whether a job can start: its build is over, or it has none (``key`` None)."""
        if key is None:
            return True
        with self._lock:
            return key in self._outcomes or key not in self._submitted

    def finished(self) -> int:
        """How many builds are over: a change says some jobs may be free."""
        with self._lock:
            return len(self._outcomes)

    def pending(self) -> int:
        with self._lock:
            return len(self._submitted) - len(self._outcomes)

    def fileno(self) -> int:
        return self._read

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._read, 4096):
                pass

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every submitted build is over; False if ``timeout`` ran out first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._finished:
            while len(self._outcomes) < len(self._submitted):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._finished.wait(left)
        return True

    def summary(self) -> dict[str, Any]:
        """What the pool did: builds by status, wall time from the first start to the last end,
        and the time builds took in all (busy_s / wall_s: how parallel it ran)."""
        with self._lock:
            outcomes = list(self._outcomes.values())
        counts: dict[str, int] = {}
        for outcome in outcomes:
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
        ends = [o.started + o.seconds for o in outcomes]
        began = self._began or 0.0
        return {
            "slots": self.slots,
            "builds": len(outcomes),
            "by_status": counts,
            "cached_failures": sum(o.cached for o in outcomes),
            "wall_s": round(max(ends) - began, 3) if ends else 0.0,
            "busy_s": round(sum(o.seconds for o in outcomes), 3),
            "longest_s": round(max((o.seconds for o in outcomes), default=0.0), 3),
        }

    def close(self) -> None:
        """Stop: queued builds are dropped, running ones killed."""
        from kernelarena.evaluate.sandbox.confine import kill_tree

        with self._lock:
            self._closed = True
            running = list(self._running.values())
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
        for _ in self._threads:
            self._queue.put(None)
        for process in running:
            kill_tree(process.pid)
        for thread in self._threads:
            thread.join(timeout=30)
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> BuildPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- building ---------------------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            request = self._queue.get()
            if request is None:
                return
            try:
                outcome = self._build(request)
            except Exception as error:  # the pool's own fault: the sandbox builds instead
                outcome = BuildOutcome("unbuilt", f"the build pool failed: {error!r}")
            with self._finished:
                self._outcomes[request.key] = outcome
                self._finished.notify_all()
            with contextlib.suppress(OSError):
                os.write(self._write, b".")

    def _writable(self) -> list[str]:
        """What a build may change besides its own temporary folder: the sandboxes' caches (it
        narrows that to its solution's own, as a sandbox does) or the trusted build cache."""
        from kernelarena.compile.cache import cache_root, sandbox_caches_root

        root = sandbox_caches_root() if self.namespaced else cache_root()
        root.mkdir(parents=True, exist_ok=True)
        return [str(root), "/dev"]

    def _namespace(self, solution: Solution) -> str | None:
        from kernelarena.evaluate.sandbox.solution_caches import namespace_of

        return namespace_of(solution) if self.namespaced else None

    def _build(self, request: _Request) -> BuildOutcome:
        """One build in a confined process; its reply (a claim, like a sandbox's) read as data."""
        from kernelarena.evaluate.process_output import read_tail

        started = time.monotonic()
        folder = Path(tempfile.mkdtemp(dir=self.folder, prefix="build-"))
        try:
            tmp = folder / "tmp"
            tmp.mkdir()
            reply_path, log_path = tmp / "reply.json", folder / "build.log"
            process = self._start(request, tmp, reply_path, log_path)
            timed_out = self._wait(request.key, process)
            seconds = time.monotonic() - started
            if timed_out:
                log = f"the build took longer than {self.timeout_s:g} s; it was stopped\n"
                log += read_tail(str(log_path))
                return BuildOutcome("failed", log, first_error(log), False, started, seconds)
            reply = _read_reply(reply_path)
            if reply is None:
                said = read_tail(str(log_path))
                why = f"the build's process exited with code {process.returncode} and no reply"
                return BuildOutcome("unbuilt", f"{why}\n{said}", "", False, started, seconds)
            return _outcome(reply, started, seconds)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _start(
        self, request: _Request, tmp: Path, reply_path: Path, log_path: Path
    ) -> subprocess.Popen[bytes]:
        """The build's process, walled in (it may write ``tmp`` and its caches), started on the
        request written into ``tmp``; it answers in ``reply_path`` and prints to ``log_path``."""
        from kernelarena.evaluate.sandbox import isolation

        asked = tmp / "request.json"
        asked.write_text(
            json.dumps(
                {
                    "definition": request.definition.to_json_dict(),
                    "solution": request.solution.to_json_dict(),
                    "target": request.target,
                    "namespace": self._namespace(request.solution),
                }
            )
        )
        writable = [*self._writable(), str(tmp)]
        command = [
            *(sys.executable, "-m", "kernelarena.evaluate.executors.build_process"),
            *(str(asked), str(reply_path), *writable),
        ]
        walls = isolation.walls()
        command, environment = isolation.walled(command, writable, tmp, walls)
        environment["MAX_JOBS"] = "1"  # the pool is the parallelism
        with open(log_path, "ab") as output:
            process = subprocess.Popen(
                command,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                start_new_session=not walls.available,
            )
        with self._lock:
            self._running[request.key] = process
        return process

    def _wait(self, key: Key, process: subprocess.Popen[bytes]) -> bool:
        """Wait for the build; whether it ran out of time (then it and all it started are killed)."""
        from kernelarena.evaluate.sandbox.confine import kill_tree

        try:
            process.wait(timeout=self.timeout_s)
            return False
        except subprocess.TimeoutExpired:
            kill_tree(process.pid)
            process.wait()
            return True
        finally:
            with self._lock:
                self._running.pop(key, None)


def _read_reply(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as handle:
            data = handle.read(REPLY_LIMIT + 1)
    except OSError:
        return None
    if len(data) > REPLY_LIMIT:
        return None
    try:
        reply = json.loads(data)
    except ValueError:
        return None
    return reply if isinstance(reply, dict) else None


def _outcome(reply: dict[str, Any], started: float, seconds: float) -> BuildOutcome:
    if "ok" in reply:
        return BuildOutcome("built", str(reply.get("artifact") or ""), "", False, started, seconds)
    if "skipped" in reply:
        return BuildOutcome("skipped", str(reply["skipped"]), "", False, started, seconds)
    if "build_error" in reply:
        log = str(reply["build_error"])[-8000:]
        cached = bool(reply.get("cached"))
        return BuildOutcome("failed", log, first_error(log), cached, started, seconds)
    return BuildOutcome(
        "unbuilt", str(reply.get("error") or reply)[-8000:], "", False, started, seconds
    )


def pool_outcomes(
    pairs: list[tuple[Definition, Solution]],
    device: str,
    *,
    namespaced: bool,
    timeout_s: float = 900.0,
    slots: int | None = None,
) -> dict[str, BuildOutcome]:
    """Build every pooled solution of ``pairs`` for ``device`` and wait: their outcomes by
    solution name (``kernelarena build``)."""
    target = build_target(device)
    wanted = [(d, s) for d, s in pairs if pooled(s)]
    if target is None or not wanted:
        return {}
    with BuildPool(slots, namespaced=namespaced, timeout_s=timeout_s, devices=0) as pool:
        keys = {s.name: pool.submit(d, s, target) for d, s in wanted}
        pool.wait()
        found = {name: pool.outcome(key) for name, key in keys.items()}
    return {name: outcome for name, outcome in found.items() if outcome is not None}
