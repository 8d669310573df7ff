"""The benchmark harness times providers interleaved and keeps a failing provider as a row."""

from __future__ import annotations

from typing import Any

import torch
from benchmarks import harness


def test_providers_are_timed_in_rotated_passes_and_a_failure_stays_a_row() -> None:
    calls: list[str] = []

    def provider(name: str) -> Any:
        def call(i: int) -> None:
            calls.append(name)

        return call

    def broken(i: int) -> None:
        raise RuntimeError("kernel launch failed")

    timings = harness._time_interleaved(
        {"a": provider("a"), "b": provider("b"), "c": provider("c"), "broken": broken},
        torch.device("cpu"),
    )
    assert isinstance(timings["broken"], RuntimeError)
    for name in ("a", "b", "c"):
        timing = timings[name]
        assert isinstance(timing, harness.Timing)
        assert timing.mode == "cpu_clock"
        # samples of every pass pooled: at least two timed calls in each of the passes
        assert timing.count >= 2 * harness.EVENT_PASSES
    # each pass starts one provider later; the broken one is not called again after it failed
    order = [calls[0]] + [calls[i] for i in range(1, len(calls)) if calls[i] != calls[i - 1]]
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"][: harness.EVENT_PASSES * 3]
