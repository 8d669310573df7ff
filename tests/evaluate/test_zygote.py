"""CPU sandboxes forked from a zygote (``evaluate.sandbox.zygote``): one per solution, each PID 1 of
namespaces of its own, gone with everything it started once retired. What a fork can see and
reach is the red-team suite's (``redteam/test_redteam.py``: ``looks_around`` and the attacks)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kernelarena.evaluate.sandbox.confine import descendants
from kernelarena.evaluate.sandbox.forked import ForkedProcess
from kernelarena.evaluate.sandbox.isolation import walls
from kernelarena.evaluate.sandbox.sandboxes import Sandboxes

pytestmark = pytest.mark.skipif(
    not walls().available, reason=f"no namespaces on this machine: {walls().why_not}"
)


def _namespace_pids(pid: int) -> list[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return [int(n) for n in line.split()[1:]]
    return []


def test_each_solution_gets_a_fork_of_its_own_that_dies_whole(tmp_path: Path) -> None:
    sandboxes = Sandboxes("cpu", tmp_path, [])
    try:
        assert sandboxes.zygote is not None and sandboxes.spares == []
        first = sandboxes.for_solution("first")
        assert isinstance(first.process, ForkedProcess), "forked, not started as a program"
        assert "no capabilities" in first.confinement and "seccomp" in first.confinement
        inside = [pid for pid in descendants(first.pid) if _namespace_pids(pid)[-1] == 1]
        assert len(inside) == 1, "the sandbox is the first process of a PID namespace of its own"
        # Its namespace is below the zygote's, which is below the judge's.
        assert len(_namespace_pids(inside[0])) == len(_namespace_pids(first.pid)) + 1
        assert sandboxes.for_solution("first") is first
        second = sandboxes.for_solution("second")
        assert second is not first and isinstance(second.process, ForkedProcess)
        assert first.process.wait(timeout=10) is not None
        # Its namespace's processes go with it; the kernel reaps them a moment later on a busy host.
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{pid}").exists() for pid in inside):
            assert time.monotonic() < deadline, f"still there: {inside}"
            time.sleep(0.01)
        assert second.alive() and second.pid != first.pid
    finally:
        sandboxes.close()
    assert second.process.wait(timeout=10) is not None


def test_without_the_zygote_sandboxes_start_as_programs_with_a_spare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELARENA_ZYGOTE", "0")
    sandboxes = Sandboxes("cpu", tmp_path, [])
    try:
        assert sandboxes.zygote is None and len(sandboxes.spares) == 1
        assert sandboxes.for_solution("a solution")._ready
    finally:
        sandboxes.close()
