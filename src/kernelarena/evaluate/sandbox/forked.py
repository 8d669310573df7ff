"""The judge's side of the ``zygote``: start it, ask it for sandboxes, watch what it forked.

A forked sandbox is not the judge's child (it is the zygote's), so its status comes from /proc:
a fork stays a zombie, its exit status readable there, until the judge stops watching it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path

from kernelarena.evaluate.sandbox import isolation
from kernelarena.evaluate.sandbox.confine import descendants, stat_fields
from kernelarena.evaluate.sandbox.descriptors import send_fds
from kernelarena.evaluate.sandbox.zygote import CAPABILITIES

# /proc/PID/stat's exit_code field (the 52nd; the 50th after the command): Linux 3.5 and later.
_EXIT_CODE_FIELD = 49


class ZygoteFailed(Exception):
    """The zygote could not start or fork: sandboxes start as programs instead."""


class ForkedProcess:
    """What ``subprocess.Popen`` gives the judge of a sandbox it started, for one it did not."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        fields = stat_fields(self.pid)
        if fields is not None and fields[0] != b"Z":
            return None
        code = -9  # reaped before the judge looked: it was killed
        if fields is not None and len(fields) > _EXIT_CODE_FIELD:
            code = os.waitstatus_to_exitcode(int(fields[_EXIT_CODE_FIELD]))
        self.returncode = code
        return code

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"sandbox {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return code


class Zygote:
    """One template process per judge; ``fork`` makes each sandbox from it. On a GPU it computes
    Triton's cache key for its forks after the first ``unkeyed_forks`` (``zygote.main``)."""

    def __init__(
        self,
        device: str,
        folder: Path,
        writable: list[str],
        found: isolation.Walls,
        unkeyed_forks: int = 0,
    ):
        self.folder = folder
        tmp = folder / f"zygote-{os.getpid()}"
        tmp.mkdir(parents=True, exist_ok=True)
        self.control, child = Pipe()
        command = [
            sys.executable,
            "-m",
            "kernelarena.evaluate.sandbox.zygote",
            str(child.fileno()),
            device,
            str(unkeyed_forks),
        ]
        # Read-write for the forks (each confines itself to its own temporary folder and caches).
        folders = [*writable, str(folder)]
        command, environment = isolation.walled(
            command, folders, tmp, found, capabilities=CAPABILITIES
        )
        self.log_path = folder / f"zygote-{device.replace(':', '')}-{os.getpid()}.log"
        self.process = isolation.start_logged(command, environment, self.log_path, child.fileno())
        child.close()
        self._ready = False
        self.watched: dict[int, ForkedProcess] = {}  # the zygote's pid of each fork -> its process

    def _reply(self, timeout: float) -> dict[str, object]:
        try:
            if not self.control.poll(timeout):
                raise ZygoteFailed(f"the sandbox zygote did not answer within {timeout:g} s")
            reply = json.loads(self.control.recv_bytes(1 << 16))
        except (EOFError, OSError, ValueError):
            raise ZygoteFailed("the sandbox zygote died: see " + str(self.log_path)) from None
        if not isinstance(reply, dict):
            raise ZygoteFailed("the sandbox zygote answered nonsense")
        return reply

    def fork(
        self, log_path: Path, tmp: Path, writable: list[str], timeout: float
    ) -> tuple[Connection, ForkedProcess]:
        """A new sandbox writing ``log_path``, confined to ``writable`` and ``tmp``: its
        connection and its process (not yet ready: ``Sandbox.wait_ready``)."""
        if not self._ready:
            if not self._reply(timeout).get("ready"):
                raise ZygoteFailed("the sandbox zygote did not start")
            self._ready = True
        self.watched = {pid: p for pid, p in self.watched.items() if p.poll() is None}
        parent, child = Pipe()
        request = {
            "tmp": str(tmp),
            "writable": [*writable, str(tmp)],
            "hidden": str(self.folder),
            "watched": list(self.watched),
        }
        with open(log_path, "ab") as log:
            try:
                self.control.send(request)
                send_fds(self.control, [child.fileno(), log.fileno()])
            except OSError:
                raise ZygoteFailed("the sandbox zygote died: see " + str(self.log_path)) from None
            finally:
                child.close()
        inner = self._reply(timeout).get("pid")
        if not isinstance(inner, int) or (host := _host_pid(self.process.pid, inner)) is None:
            parent.close()
            raise ZygoteFailed(f"the sandbox zygote's fork {inner} is not to be found")
        process = ForkedProcess(host)
        self.watched[inner] = process
        return parent, process

    def close(self) -> None:
        self.control.close()
        self.process.kill()
        self.process.wait()


def _host_pid(root: int, inner: int) -> int | None:
    """The pid, as the judge sees it, of the process below ``root`` that the zygote (in the
    namespace one level down) calls ``inner``: not one in a fork's deeper namespace."""
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/status", "rb") as handle:
                numbers = next(line.split()[1:] for line in handle if line.startswith(b"NSpid:"))
        except (OSError, StopIteration):
            continue
        if len(numbers) == 2 and int(numbers[1]) == inner:
            return pid
    return None
