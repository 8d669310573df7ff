"""The judge's kept draws: found again by key and by their very tensors; past the budget the other
workloads' most recently used going first, then the workload's own least recently used; a draw
over a thirty-second of the budget not kept; a budget sized to the device; and a run that takes a
definition's workloads in turn for each solution finding most of its draws kept when they are over
the budget."""

from __future__ import annotations

import pytest
import torch

from kernelarena.evaluate.judge.kept_draws import KeptDraws, kept_budget
from kernelarena.runtime.inputs import STANDARD


def _draw(elements: int) -> dict[str, object]:
    return {"x": torch.randn(elements), "eps": 1e-6}  # float32: 4 bytes an element


def test_a_draw_and_its_outputs_are_found_by_its_tensors() -> None:
    kept = KeptDraws(budget=1 << 20)
    draw = _draw(1000)
    kept.put(("w", 1, STANDARD), draw)  # type: ignore[arg-type]
    again = kept.get(("w", 1, STANDARD))
    assert again is not None and again["x"] is draw["x"]
    out = {"y": torch.randn(1000)}
    kept.keep_outputs(again, False, out)  # type: ignore[arg-type]
    assert kept.outputs(again, False) is out  # type: ignore[arg-type]
    assert kept.outputs(again, True) is None  # type: ignore[arg-type]
    copied = {"x": draw["x"].clone(), "eps": 1e-6}  # the same values elsewhere: not the draw
    assert kept.outputs(copied, False) is None  # type: ignore[arg-type]


def test_the_least_recently_used_go_first_and_a_large_draw_is_not_kept() -> None:
    kept = KeptDraws(budget=400_000)  # 33 draws of 12 kB; a draw over 12.5 kB is not kept
    for seed in range(33):
        kept.put(("w", seed, STANDARD), _draw(3000))  # type: ignore[arg-type]
    assert kept.get(("w", 0, STANDARD)) is not None  # used last now
    kept.put(("w", 33, STANDARD), _draw(3000))  # type: ignore[arg-type]
    assert kept.get(("w", 1, STANDARD)) is None  # the least recently used went
    assert kept.get(("w", 0, STANDARD)) is not None
    kept.put(("w", 99, STANDARD), _draw(5000))  # 20 kB: over a thirty-second of the budget
    assert kept.get(("w", 99, STANDARD)) is None
    assert all(kept.get(("w", seed, STANDARD)) is not None for seed in (0, 2, 33))


def test_the_budget_is_sized_to_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    class Properties:
        total_memory = 80 << 30

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: Properties)
    assert kept_budget(torch.device("cuda:0")) == 5 << 29  # an H100: a thirty-second
    Properties.total_memory = 1 << 40
    assert kept_budget(torch.device("cuda:0")) == 4 << 30  # at most 4 GiB
    assert kept_budget(torch.device("cpu")) == 64 << 20


def test_a_draw_kept_again_counts_once_and_its_outputs_count() -> None:
    kept = KeptDraws(budget=400_000)  # 33 draws of 12 kB
    for _ in range(5):
        kept.put(("w", 0, STANDARD), _draw(3000))  # type: ignore[arg-type]
    for seed in range(1, 32):
        kept.put(("w", seed, STANDARD), _draw(3000))  # type: ignore[arg-type]
    assert all(kept.get(("w", seed, STANDARD)) is not None for seed in range(32))  # 384 kB
    last = kept.get(("w", 31, STANDARD))
    assert last is not None
    kept.keep_outputs(last, False, {"y": torch.randn(3000)})  # type: ignore[arg-type]
    assert kept.get(("w", 0, STANDARD)) is not None  # 396 kB: nothing goes
    kept.keep_outputs(last, True, {"y": torch.randn(3000)})  # type: ignore[arg-type]
    assert kept.get(("w", 1, STANDARD)) is None  # 408 kB: the least recently used went
    assert kept.outputs(last, True) is not None  # type: ignore[arg-type]


def test_the_other_workloads_most_recently_used_go_first() -> None:
    kept = KeptDraws(budget=400_000)  # 33 draws of 12 kB
    for workload in ("a", "b", "c"):
        for seed in range(11):
            kept.put((workload, seed, STANDARD), _draw(3000))  # type: ignore[arg-type]
    assert kept.get(("a", 0, STANDARD)) is not None  # a's first draw used last now
    kept.put(("d", 0, STANDARD), _draw(3000))  # type: ignore[arg-type]
    # a was used last of the others: its newest draw goes, not b's or c's oldest
    assert kept.get(("a", 0, STANDARD)) is None
    assert all(kept.get(("b", seed, STANDARD)) is not None for seed in range(11))
    assert all(kept.get(("c", seed, STANDARD)) is not None for seed in range(11))
    assert kept.get(("d", 0, STANDARD)) is not None


def _solutions_in_turn(kept: KeptDraws, solutions: int) -> list[int]:
    """Draws found by each solution taking eight workloads of ten 12 kB draws in turn."""
    found = []
    for _ in range(solutions):
        hits = 0
        for workload in range(8):
            for seed in range(10):
                key = (str(workload), seed, STANDARD)
                if kept.get(key) is not None:  # type: ignore[arg-type]
                    hits += 1
                else:
                    kept.put(key, _draw(3000))  # type: ignore[arg-type]
        found.append(hits)
    return found


def test_solutions_in_turn_find_what_fits_when_the_draws_are_over_the_budget() -> None:
    # 80 draws of 12 kB, 64 fit: least recently used first, each solution would find none
    found = _solutions_in_turn(KeptDraws(budget=800_000), solutions=4)
    assert found[0] == 0 and all(hits >= 60 for hits in found[1:]), found
