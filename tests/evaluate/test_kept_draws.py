"""The judge's kept draws: found again by key and by their very tensors, the least recently used
going first past the budget, a draw over a thirty-second of the budget not kept, and a budget sized
to the device."""

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
