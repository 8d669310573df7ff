"""Spare sandboxes never run beside a timing: the judge stops them while it times
(``Sandboxes.spares_stopped``) instead of waiting for them to start. On the CPU sandboxes are
forked when needed (``zygote``): these tests start them as programs, as a GPU does."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kernelarena.evaluate.sandbox import sandboxes as sandboxes_module
from kernelarena.evaluate.sandbox.confine import descendants, kill_tree, stat_fields
from kernelarena.evaluate.sandbox.sandboxes import Sandboxes


@pytest.fixture(autouse=True)
def _spares_as_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELARENA_ZYGOTE", "0")


def _state(pid: int) -> str:
    """The process's state letter in /proc (T: stopped)."""
    fields = stat_fields(pid)
    assert fields is not None, f"process {pid} is gone"
    return fields[0].decode()


def test_a_starting_spare_is_stopped_while_the_judge_times_and_resumed_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The spare's bwrap may be inside fork when it is signalled: its child is found only once it
    # has stopped. On a loaded CI host that can take longer than the judge's short bound.
    monkeypatch.setattr(sandboxes_module, "STOP_PATIENCE_S", 10.0)
    sandboxes = Sandboxes("cpu", tmp_path, [str(tmp_path)])
    try:
        starting = sandboxes.spares[0]
        assert not starting._ready  # an interpreter importing torch takes longer than this
        with sandboxes.spares_stopped():
            with sandboxes.spares_stopped():  # nested: only the outermost resumes
                pass
            processes = [starting.pid, *descendants(starting.pid)]  # none starts while stopped
            # Stopped once the kernel schedules them (spares_stopped waits for it).
            deadline = time.monotonic() + 10
            while not {_state(pid) for pid in processes} <= {"T", "Z"}:  # Z: one that had exited
                assert time.monotonic() < deadline, {pid: _state(pid) for pid in processes}
                time.sleep(0.01)
        assert "T" not in {_state(pid) for pid in processes if Path(f"/proc/{pid}").exists()}
        chosen = sandboxes.for_solution("a solution")  # started once resumed
        assert chosen is starting and chosen._ready and chosen.key == "a solution"
    finally:
        sandboxes.close()


def test_a_dead_spare_is_replaced_when_a_solution_needs_it(tmp_path: Path) -> None:
    sandboxes = Sandboxes("cpu", tmp_path, [str(tmp_path)])
    try:
        dead = sandboxes.spares[0]
        kill_tree(dead.pid)  # bwrap, its init and the interpreter
        dead.process.wait()
        with sandboxes.spares_stopped():  # a dead spare stops nothing and raises nothing
            pass
        chosen = sandboxes.for_solution("a solution")
        assert chosen is not dead and chosen._ready
    finally:
        sandboxes.close()
