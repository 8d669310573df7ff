"""The judge's side of its sandbox processes: start, ask, pause, retire.

One sandbox serves one solution and is never reused for another, so nothing a solution patches can
reach the next one. While one works, a spare (torch imported, device initialised, no solution loaded)
starts beside it, so the next solution does not wait for an interpreter. Requests go out pickled;
answers come back as JSON of bounded size, parsed as data. A sandbox that dies, answers nonsense or
leaves processes behind is retired, and the job says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

from kernelarena.evaluate.process_output import read_tail
from kernelarena.evaluate.sandbox import isolation
from kernelarena.evaluate.sandbox.confine import descendants, kill_tree, stop_tree
from kernelarena.evaluate.sandbox.descriptors import send_fds
from kernelarena.evaluate.sandbox.forked import ForkedProcess, Zygote, ZygoteFailed
from kernelarena.evaluate.sandbox.zygote import FORK_FAILED

REPLY_LIMIT = 1 << 20
# How many spare sandboxes a judge keeps ready, where set (the default: ``_spares_wanted``).
SPARES_ENV = "KERNELARENA_SPARE_SANDBOXES"
# How long a pause waits for a sandbox's processes to stop: one that is not stopped when the walk
# below it is made can still fork a child the walk misses. Processes stop in well under a
# millisecond unless the host is overloaded or one sleeps uninterruptibly (a spare making its CUDA
# context may), and the judge's timing waits on it, so the bound stays short.
STOP_PATIENCE_S = 0.1
Result = TypeVar("Result")


class SandboxDied(Exception):
    """The sandbox exited, broke the protocol or answered out of bounds; ``str`` says how."""


class Sandbox:
    def __init__(
        self,
        device: str,
        log_path: Path,
        writable: list[str],
        tmp: Path,
        first: bool = False,
        zygote: Zygote | None = None,
    ) -> None:
        self.device = device
        self.log_path = log_path
        self.role = "solution"  # whose process it is, for the notes on its death
        self.key: str | None = None
        self.builds: dict[str, dict[str, Any]] = {}
        self.confinement = ""
        self.walls = isolation.walls()
        self._ready = False
        self.conn: Connection
        self.process: subprocess.Popen[bytes] | ForkedProcess
        if zygote is not None:
            self.conn, self.process = zygote.fork(log_path, tmp, writable, 600.0)
            self._own: set[int] = {self.process.pid}
            return
        parent, child = Pipe()
        command = [
            sys.executable,
            "-m",
            "kernelarena.evaluate.sandbox.server",
            str(child.fileno()),
            device,
            "first"
            if first
            else "spare",  # the first is waited for at once (triton_warmth.warm_triton)
            *writable,
        ]
        command, environment = isolation.walled(command, writable, tmp, self.walls)
        # Without namespaces, at least no controlling terminal (bwrap makes a session).
        self.process = isolation.start_logged(
            command, environment, log_path, child.fileno(), new_session=not self.walls.available
        )
        child.close()
        # The processes that are the sandbox itself (bwrap's and the interpreter), found when it
        # says it is ready, before any solution code runs: every other one is the solution's.
        self._own = {self.process.pid}
        self.conn = parent

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def started(self, timeout: float) -> bool:
        """Whether the sandbox has said it is ready (or has died) within ``timeout`` seconds; reads
        nothing, so ``wait_ready`` then returns (or raises) at once."""
        return self._ready or self.conn.poll(timeout)

    def wait_ready(self, timeout: float) -> None:
        """Wait for the sandbox to say it started (or raise ``SandboxDied``)."""
        if self._ready:
            return
        reply = self._receive(timeout)
        if not reply.get("ready"):
            raise SandboxDied(f"the sandbox did not start: {reply}")
        self.confinement = isolation.describe(self.walls, str(reply.get("confinement", "")))
        self._own |= isolation.sandbox_processes(self.process.pid, reply.get("pid"))
        self._ready = True

    def request(
        self, *message: Any, timeout: float | None = None, fds: Sequence[int] = ()
    ) -> dict[str, Any]:
        """Send ``message`` (and pass ``fds`` right behind it: ``descriptors.receive_fds``), then wait
        for the reply."""
        self.send(*message, fds=fds)
        return self.receive(timeout)

    def request_beside(
        self, message: tuple[Any, ...], beside: Callable[[], Result]
    ) -> tuple[dict[str, Any], Result]:
        """The reply to ``message``, and what ``beside()`` returned, run while the sandbox works
        on the request: the judge's own work that needs nothing of the reply nor of what the
        sandbox can write (the reference's outputs for inputs the judge keeps). The reply is
        read even where ``beside`` raises, so that the next request's is not taken for it."""
        self.send(*message)
        try:
            done = beside()
        except BaseException:
            with contextlib.suppress(SandboxDied):
                self.receive()
            raise
        return self.receive(), done

    def send(self, *message: Any, fds: Sequence[int] = ()) -> None:
        """A request's first half (``request``): its reply is left for ``receive``."""
        try:
            self.conn.send(message)
            if fds:
                send_fds(self.conn, list(fds))
        except (OSError, BrokenPipeError):
            raise SandboxDied(self._death_note()) from None

    def receive(self, timeout: float | None = None) -> dict[str, Any]:
        """A request's second half: the reply to the last message ``send`` sent."""
        return self._receive(timeout)

    def _receive(self, timeout: float | None) -> dict[str, Any]:
        try:
            if timeout is not None and not self.conn.poll(timeout):
                raise SandboxDied(f"the sandbox did not answer within {timeout:g} s")
            data = self.conn.recv_bytes(REPLY_LIMIT)
        except (EOFError, OSError):
            raise SandboxDied(self._death_note()) from None
        try:
            reply = json.loads(data)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            raise SandboxDied(f"the {self.role}'s process answered something that is not a reply")
        return reply

    def _death_note(self) -> str:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return f"the {self.role}'s process stopped answering\n" + read_tail(str(self.log_path))
        if code > 128 and self.walls.available:
            code = 128 - code  # bwrap's init exits with 128 + the signal that killed the sandbox
        if code < 0:
            try:
                cause = f"died from signal {signal.Signals(-code).name}"
            except ValueError:
                cause = f"died from signal {-code}"
            if -code == signal.SIGXFSZ:
                cause += " (a file it wrote, its output included, reached the sandbox's limit)"
        else:
            cause = f"exited with code {code}"
        return f"the {self.role}'s process {cause} during its job\n" + read_tail(str(self.log_path))

    def pause(self) -> None:
        """Stop it (and what it started) while the judge times the reference: a thread left
        running there could otherwise slow the reference and inflate the solution's speedup.
        Returns once they have stopped (a signal is delivered when the kernel next schedules the
        process: on a loaded host, after the caller has moved on), or after ``STOP_PATIENCE_S``."""
        stop_tree(self.pid, STOP_PATIENCE_S)

    def resume(self) -> None:
        for pid in [self.pid, *descendants(self.pid)]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)

    def stop_finding_strays(self) -> list[int]:
        """``pause`` it, and return what ``strays`` would."""
        found = stop_tree(self.pid, STOP_PATIENCE_S)[1:]
        return [pid for pid in found if pid not in self._own]

    def strays(self) -> list[int]:
        """Processes the solution started that still run once its job is over."""
        return [pid for pid in descendants(self.pid) if pid not in self._own]

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_since(self, offset: int, limit: int = 6000) -> str:
        """At most the last ``limit`` bytes written after ``offset``: a solution that prints
        gigabytes costs the judge a seek."""
        return read_tail(str(self.log_path), limit, since=offset)

    def retire(self) -> None:
        """Killed at once; reaped in the background (a process with a CUDA context takes ~0.1 s
        to go, which the next job need not wait for)."""
        kill_tree(self.pid)
        self.conn.close()
        threading.Thread(target=self.process.wait, name="reap-sandbox", daemon=True).start()


class Sandboxes:
    """At most one sandbox with a solution loaded per judge. Inside the walls, each sandbox is
    forked from a ``zygote`` that imported torch once: on the CPU when it is needed (tens of
    milliseconds), on a GPU one ``spare`` ahead, and two as soon as the zygote is up (a fork makes
    its CUDA context, a few tenths of a second). Started as programs (``KERNELARENA_ZYGOTE=0``, or
    where the walls or a fork's CUDA context cannot stand), a sandbox takes seconds to import
    torch and make its context, often longer than a solution's jobs: on a GPU three spares start
    ahead (a GPU machine has cores to spare), the first solution's and its reference's at once and
    the next solution's, which a spare started after the first job could not be in time for, since
    spares are stopped while the judge times (on an H100, 1.2 s of waiting for the second of three
    solutions of 8 jobs each); on the CPU one."""

    def __init__(self, device: str, folder: Path, writable: list[str]) -> None:
        self.device = device
        self.folder = folder
        self.writable = writable
        self.startup_timeout_s = 600.0
        self.zygote: Zygote | None = None
        found = isolation.walls()
        if found.available and _zygote_wanted():
            try:
                # The forks made at the start, which the first job waits for, do not wait for
                # Triton's cache key too: the zygote computes it after them.
                unkeyed = FORKED_AT_START if device.startswith("cuda") else 0
                self.zygote = Zygote(device, folder, writable, found, unkeyed)
            except (OSError, ZygoteFailed) as failed:
                print(f"kernelarena: sandboxes start as programs: {failed}", flush=True)
        self.spare_count = self._spares_wanted()
        self._spawned = 0
        self._stopped = 0  # the depth of ``spares_stopped``
        self.current: Sandbox | None = None
        self.spares: list[Sandbox] = []
        self._forking: threading.Thread | None = None
        if self.zygote is None:
            self.spares = [self._spawn() for _ in range(self.spare_count)]
        elif device.startswith("cuda"):
            # The first job's sandbox and its reference's, forked as soon as the zygote is up, in
            # a thread: the judge imports torch meanwhile, and the forks make their contexts.
            self._forking = threading.Thread(
                target=self._fork_ahead, args=(FORKED_AT_START,), name="fork-ahead", daemon=True
            )
            self._forking.start()

    def _fork_ahead(self, count: int) -> None:
        """``count`` spares forked (the zygote's start waited for). Alone with the sandboxes until
        ``_forked`` joins it; what fails here, ``fresh`` meets again and reports."""
        with contextlib.suppress(Exception):
            for _ in range(count):
                self.spares.append(self._spawn())

    def _forked(self) -> None:
        """The forks made at the start, done, before anything else touches the sandboxes."""
        if self._forking is not None:
            self._forking.join()
            self._forking = None

    def _spawn(self) -> Sandbox:
        self._spawned += 1
        # Named by judge too: the judges of a run (two on a two-core CPU) share one folder.
        name = f"sandbox-{self.device.replace(':', '')}-{os.getpid()}-{self._spawned}"
        tmp = self.folder / name
        tmp.mkdir(parents=True, exist_ok=True)
        log = self.folder / f"{name}.log"
        writable = [*self.writable, str(tmp)]
        if self.zygote is not None:
            try:
                return Sandbox(self.device, log, writable, tmp, zygote=self.zygote)
            except ZygoteFailed as failed:
                self._drop_zygote(str(failed))
        return Sandbox(self.device, log, writable, tmp, self._spawned == 1)

    def _spares_wanted(self) -> int:
        on_gpu = self.device.startswith("cuda")
        default = (1 if on_gpu else 0) if self.zygote else (3 if on_gpu else 1)
        return int(os.environ.get(SPARES_ENV, default))

    def _drop_zygote(self, why: str = "") -> None:
        """No more forks: sandboxes start as programs from now (``why`` goes to the log)."""
        if why:
            print(f"kernelarena: sandboxes start as programs from now: {why}", flush=True)
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None
            self.spare_count = self._spares_wanted()

    def for_solution(self, key: str) -> Sandbox:
        """The sandbox serving ``key``: the current one if it does, else the oldest spare (or a
        new one)."""
        if self.current is not None and self.current.key == key and self.current.alive():
            return self.current
        self.retire()
        sandbox = self.fresh()
        sandbox.key = key
        self.current = sandbox
        return sandbox

    def fresh(self) -> Sandbox:
        """A started sandbox that serves nothing yet, for a solution or a definition's reference
        (``reference_sandbox``): the oldest spare, or a new one. The caller owns it."""
        self._forked()
        try:
            while self.spares:  # a spare that died before it served anything is passed over
                spare = self.spares.pop(0)
                try:
                    spare.wait_ready(self.startup_timeout_s)
                    return spare
                except SandboxDied:
                    fork_failed = spare.process.poll() == FORK_FAILED
                    spare.retire()
                    if fork_failed and self.zygote is not None:
                        self._drop_zygote(spare.log_since(0, 2000))
            sandbox = self._spawn()
            try:
                sandbox.wait_ready(self.startup_timeout_s)
            except SandboxDied:
                if sandbox.process.poll() != FORK_FAILED or self.zygote is None:
                    raise
                # The walls of a fork could not be raised here (a kernel refusing nested
                # namespaces): nothing of a solution ran, so the sandbox starts again as a program.
                sandbox.retire()
                self._drop_zygote(sandbox.log_since(0, 2000))
                sandbox = self._spawn()
                sandbox.wait_ready(self.startup_timeout_s)
            return sandbox
        finally:
            while len(self.spares) < self.spare_count:
                self.spares.append(self._spawn())

    @contextlib.contextmanager
    def spares_stopped(self) -> Iterator[None]:
        """The spare sandboxes (and whatever they started) stopped while the judge times: a spare
        still starting takes the host's CPU and the GPU's driver from the calls being timed (on an
        H100, eager clocks of up to 5.8x a call's host submit time: a CUDA rmsnorm read 45 us a
        call for 7.8 us of host work and 2.9 us of GPU time). Stopped, not waited for: a spare
        starts in the time between timings, and a GPU sandbox takes seconds to start. Nests: the
        outermost resumes them."""
        self._forked()
        self._stopped += 1
        stopped = list(self.spares) if self._stopped == 1 else []
        for spare in stopped:
            spare.pause()
        try:
            yield
        finally:
            self._stopped -= 1
            for spare in stopped:
                spare.resume()

    def retire(self) -> None:
        if self.current is not None:
            self.current.retire()
            self.current = None

    def close(self) -> None:
        self._forked()
        self.retire()
        for spare in self.spares:
            spare.retire()
        self.spares = []
        self._drop_zygote()


# Forked from the GPU's zygote as soon as it is up: the first job's sandbox and its reference's.
FORKED_AT_START = 2


def _zygote_wanted() -> bool:
    return os.environ.get("KERNELARENA_ZYGOTE", "1") != "0"


def with_sandbox_paused(sandbox: Sandbox | None, work: Callable[[], Any]) -> Any:
    if sandbox is None:
        return work()
    sandbox.pause()
    try:
        return work()
    finally:
        sandbox.resume()
