"""A workload with an empty batch goes through every check and the timing like any other: its
sets hold no bytes, and the reference's requests are still made of them (an empty set first in
line once found no batch to join: IndexError, every solution's RUNTIME_ERROR)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from kernelarena.evaluate.judge.set_checks import EXPECT_BATCH_BYTES, _batches
from tests.evaluate.test_large_sets import _check_all_passed, _dataset, run_on_cpu


def test_empty_sets_join_the_reference_requests_like_any_other() -> None:
    empty, small, large = (SimpleNamespace(bytes=n) for n in (0, 1 << 20, EXPECT_BATCH_BYTES))
    assert _batches([empty, empty]) == [[empty, empty]]  # type: ignore[list-item]
    assert _batches([empty, large, small]) == [[empty, large], [small]]  # type: ignore[list-item]
    assert _batches([large, large]) == [[large], [large]]  # type: ignore[list-item]
    assert _batches([]) == []


def test_an_empty_batch_passes_checked_and_timed(tmp_path: Path) -> None:
    _check_all_passed(run_on_cpu(_dataset(tmp_path, "cpu", (0, 3))), 2)
