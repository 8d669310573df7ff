"""Stopping and killing a process tree that keeps forking: no child escapes between a walk and
its parent's signal."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from kernelarena.evaluate.sandbox.confine import descendants, kill_tree, stat_fields, stop_tree

# Forks a child that forks a grandchild, over and over: every walk of the tree races new forks.
FORKER = """
import os, time
while True:
    if os.fork() == 0:
        if os.fork() == 0:
            time.sleep(0.05)
            os._exit(0)
        time.sleep(0.05)
        os._exit(0)
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
"""


def _state(pid: int) -> str | None:
    """The process's state letter, None when it is gone."""
    fields = stat_fields(pid)
    return fields[0].decode() if fields else None


def _resume(root: int) -> None:
    for pid in [root, *descendants(root)]:
        with contextlib.suppress(ProcessLookupError):  # a child whose sleep had ended
            os.kill(pid, signal.SIGCONT)


def test_stop_tree_leaves_no_process_of_a_forking_tree_running() -> None:
    """A child forked while its parent was being signalled is signalled too. A single walk and
    round of signals let one escape in 168 and 194 of 200 rounds (two runs on a 2-core machine)."""
    forker = subprocess.Popen([sys.executable, "-c", FORKER])
    try:
        for _ in range(200):
            time.sleep(0.005)
            signalled = stop_tree(forker.pid, patience_s=10)
            assert signalled[0] == forker.pid
            time.sleep(0.01)  # an escaped child would have forked by now, and lives 50 ms
            below = {pid: _state(pid) for pid in descendants(forker.pid)}
            assert set(below) <= set(signalled), below
            assert set(below.values()) <= {"T", "Z", None}, below
            _resume(forker.pid)
    finally:
        kill_tree(forker.pid)
        forker.wait()


def test_kill_tree_kills_the_whole_tree() -> None:
    forker = subprocess.Popen([sys.executable, "-c", FORKER])
    deadline = time.monotonic() + 10  # Python's start may take a while on a loaded machine
    while not (below := descendants(forker.pid)):
        assert time.monotonic() < deadline, "the forker forked nothing"
        time.sleep(0.01)
    kill_tree(forker.pid)
    assert forker.wait(timeout=10) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while any(_state(pid) not in (None, "Z") for pid in below):
        assert time.monotonic() < deadline, {pid: _state(pid) for pid in below}
        time.sleep(0.01)
