"""Spare sandboxes are started before a timing, never beside it (``Sandboxes.settle``). On the CPU
sandboxes are forked when needed (``zygote``): these tests start them as programs, as a GPU does."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelarena.evaluate.sandbox.confine import descendants, kill_all
from kernelarena.evaluate.sandbox.sandboxes import Sandboxes


@pytest.fixture(autouse=True)
def _spares_as_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELARENA_ZYGOTE", "0")


def test_settle_waits_for_every_spare_and_drops_a_dead_one(tmp_path: Path) -> None:
    sandboxes = Sandboxes("cpu", tmp_path, [str(tmp_path)])
    try:
        sandboxes.spares.append(sandboxes._spawn())
        dead = sandboxes.spares[-1]
        kill_all([*descendants(dead.pid), dead.pid])  # bwrap, its init and the interpreter
        dead.process.wait()
        sandboxes.settle()
        assert dead not in sandboxes.spares
        assert sandboxes.spares and all(spare._ready for spare in sandboxes.spares)
        chosen = sandboxes.for_solution("a solution")  # a settled spare serves at once
        assert chosen._ready and chosen.key == "a solution"
    finally:
        sandboxes.close()


def test_settle_leaves_a_spare_that_is_still_starting_after_its_wait(tmp_path: Path) -> None:
    sandboxes = Sandboxes("cpu", tmp_path, [str(tmp_path)])
    try:
        starting = sandboxes.spares[0]
        sandboxes.settle(wait_s=0.0)  # an interpreter importing torch takes longer than that
        assert sandboxes.spares == [starting] and not starting._ready
        sandboxes.settle()
        assert starting._ready
    finally:
        sandboxes.close()
