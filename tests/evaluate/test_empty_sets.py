"""A workload with an empty batch goes through every check and the timing like any other: its
sets hold no bytes, and the reference's requests are still made of them (an empty set first in
line once found no batch to join: IndexError, every solution's RUNTIME_ERROR)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from kernelarena.evaluate.judge.request_runs import REQUEST_SET_BYTES, in_runs
from tests.evaluate.test_large_sets import _check_all_passed, _dataset, run_on_cpu


def test_empty_sets_join_the_reference_requests_like_any_other() -> None:
    empty, small, large = (SimpleNamespace(bytes=n) for n in (0, 1 << 20, REQUEST_SET_BYTES))

    def runs(sets: list[SimpleNamespace]) -> list[list[SimpleNamespace]]:
        return in_runs(sets, lambda shared: shared.bytes)

    assert runs([empty, empty]) == [[empty, empty]]
    assert runs([empty, large, small]) == [[empty, large], [small]]
    assert runs([large, large]) == [[large], [large]]
    assert runs([]) == []
    # Sets of one size (the seeds a judge draws at once): as many as the bound holds.
    assert [len(r) for r in in_runs(list(range(9)), lambda _: REQUEST_SET_BYTES // 4)] == [4, 4, 1]
    assert in_runs([1, 2], lambda _: 0) == [[1, 2]]


def test_an_empty_batch_passes_checked_and_timed(tmp_path: Path) -> None:
    _check_all_passed(run_on_cpu(_dataset(tmp_path, "cpu", (0, 3))), 2)
