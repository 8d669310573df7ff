"""The judge's kept draws: found again by key and by their very tensors, the least recently used
going first past the budget, all of them going when a draw larger than the budget comes or a GPU
runs short of free memory, and a budget sized to the device."""

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


def test_the_least_recently_used_go_first_and_a_draw_over_the_budget_clears_all() -> None:
    kept = KeptDraws(budget=13_000)  # three draws of 4 kB
    for seed in range(3):
        kept.put(("w", seed, STANDARD), _draw(1000))  # type: ignore[arg-type]
    assert kept.get(("w", 0, STANDARD)) is not None  # used last now
    kept.put(("w", 3, STANDARD), _draw(1000))  # type: ignore[arg-type]
    assert kept.get(("w", 1, STANDARD)) is None  # the least recently used went
    assert kept.get(("w", 0, STANDARD)) is not None
    kept.put(("w", 9, STANDARD), _draw(5000))  # 20 kB: over the whole budget
    assert all(kept.get(("w", seed, STANDARD)) is None for seed in (0, 2, 3, 9))


def test_on_a_gpu_short_of_free_memory_nothing_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The solutions need the device's memory more than the judge's kept draws do: under a
    quarter free, a new draw is not kept and what was kept goes."""
    free = {"bytes": 60}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["bytes"], 100))
    kept = KeptDraws(budget=1 << 20, device=torch.device("cuda:0"))
    kept.put(("w", 0, STANDARD), _draw(1000))  # type: ignore[arg-type]
    assert kept.get(("w", 0, STANDARD)) is not None
    free["bytes"] = 20
    kept.put(("w", 1, STANDARD), _draw(1000))  # type: ignore[arg-type]
    assert kept.get(("w", 1, STANDARD)) is None
    assert kept.get(("w", 0, STANDARD)) is None


def test_the_budget_is_sized_to_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    class Properties:
        total_memory = 80 << 30

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: Properties)
    assert kept_budget(torch.device("cuda:0")) == 5 << 30  # an H100: a sixteenth
    Properties.total_memory = 1 << 40
    assert kept_budget(torch.device("cuda:0")) == 8 << 30  # at most 8 GiB
    assert kept_budget(torch.device("cpu")) == 64 << 20
