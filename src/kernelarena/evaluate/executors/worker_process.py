"""The local executor's handle on a worker process: the few calls it makes on it, whether it
answers, and what its death says."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from multiprocessing.connection import Connection

from kernelarena.evaluate.messages import Message


class WorkerProcess:
    """A worker process, over ``subprocess.Popen``."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def exitcode(self) -> int | None:
        return self.popen.poll()

    def join(self, timeout: float | None = None) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=timeout)

    def reap_in_background(self) -> None:
        if self.popen.poll() is None:
            threading.Thread(target=self.popen.wait, name="reap-worker", daemon=True).start()

    def kill(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)  # the worker and anything it started
            except (ProcessLookupError, PermissionError):
                self.popen.kill()


def said_closed(conn: Connection, process: WorkerProcess, timeout: float) -> bool:
    """Whether a stopped worker said it has closed (or has exited) within ``timeout``; results
    still in the pipe are dropped: ``close`` comes after the last job."""
    deadline = time.monotonic() + timeout
    try:
        while conn.poll(max(0.0, deadline - time.monotonic())):
            if conn.recv()[0] == Message.CLOSED:
                return True
    except (EOFError, OSError):
        process.join(timeout=max(0.0, deadline - time.monotonic()))
        return not process.is_alive()
    return False


def answered(conn: Connection, process: WorkerProcess, timeout: float) -> bool:
    """Wait for a message from a starting worker; False if it dies or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if conn.poll(0.2):
            return True
        if not process.is_alive():
            return conn.poll(0)
    return False


def death_note(exitcode: int | None) -> str:
    if exitcode is None:
        return "the worker process stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = str(-exitcode)
        return f"the worker process died from signal {name} while running the solution"
    return f"the worker process exited with code {exitcode} while running the solution"
