"""Which figure ranks: eager per-call time outside CUDA graph capture (the default), GPU time
inside it or when asked; traces timed while compiling are never admitted."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import kernelarena
from kernelarena.dispatch import calls
from kernelarena.dispatch.store import load_or_build
from tests.dispatch.toys import CPU, add, marker, timed, toy_definition, toy_set, workload

TOY = toy_definition()
# GPU_FAST has the shorter GPU time, LAUNCH_FAST the shorter eager call: at small shapes a
# launcher's host cost decides what an eager caller pays.
GPU_FAST, LAUNCH_FAST = marker(TOY, 1), marker(TOY, 2)
SMALL, LARGE = workload(TOY, rows=4, cols=8), workload(TOY, rows=64, cols=8)


def measured() -> Any:
    """At 4 x 8: GPU_FAST 2 us on the GPU but 20 us a call eagerly, LAUNCH_FAST 5 us and 8 us.
    At 64 x 8 both rankings agree on GPU_FAST."""
    trace_set = toy_set(TOY, solutions=[GPU_FAST, LAUNCH_FAST])
    add(
        trace_set,
        timed(TOY, GPU_FAST, SMALL, 2.0, eager_us=20.0),
        timed(TOY, LAUNCH_FAST, SMALL, 5.0, eager_us=8.0),
        timed(TOY, GPU_FAST, LARGE, 50.0, eager_us=52.0),
        timed(TOY, LAUNCH_FAST, LARGE, 90.0, eager_us=95.0),
    )
    return trace_set


@kernelarena.apply("toy")
def toy(x: torch.Tensor, factor: float) -> torch.Tensor:
    return torch.full_like(x, -1)


def test_tables_rank_by_eager_time_or_by_gpu_time() -> None:
    trace_set = measured()
    eager = load_or_build(TOY, trace_set, CPU, "cpu", rank_by="eager")
    gpu = load_or_build(TOY, trace_set, CPU, "cpu", rank_by="gpu")
    assert [(e.winner, e.ranked_by) for e in eager.entries] == [
        (LAUNCH_FAST.name, "eager"),
        (GPU_FAST.name, "eager"),
    ]
    assert eager.entries[0].margin_ms == pytest.approx(12e-3)  # 20 - 8 us, no spread
    assert [(e.winner, e.ranked_by) for e in gpu.entries] == [
        (GPU_FAST.name, "gpu"),
        (GPU_FAST.name, "gpu"),
    ]


def test_a_key_without_every_eager_figure_is_ranked_by_gpu_time() -> None:
    trace_set = toy_set(TOY, solutions=[GPU_FAST, LAUNCH_FAST])
    add(
        trace_set,
        timed(TOY, GPU_FAST, SMALL, 2.0),  # measured before eager times were recorded
        timed(TOY, LAUNCH_FAST, SMALL, 5.0, eager_us=8.0),
    )
    entry = load_or_build(TOY, trace_set, CPU, "cpu", rank_by="eager").entries[0]
    assert (entry.winner, entry.ranked_by) == (GPU_FAST.name, "gpu")


def test_host_submit_time_ranks_eager_calls_as_on_a_slower_host() -> None:
    """LAUNCH_FAST's 49 us eager call hides 45 us of host work under its GPU time; GPU_FAST's
    51 us call needs 10 us of host. On a host 1.5x slower the first costs 67.5 us: GPU_FAST wins.
    Where one candidate has no submit time the key ranks by eager time alone (LAUNCH_FAST)."""
    trace_set = toy_set(TOY, solutions=[GPU_FAST, LAUNCH_FAST])
    add(
        trace_set,
        timed(TOY, LAUNCH_FAST, SMALL, 47.0, eager_us=49.0, host_us=45.0),
        timed(TOY, GPU_FAST, SMALL, 48.0, eager_us=51.0, host_us=10.0),
        timed(TOY, LAUNCH_FAST, LARGE, 47.0, eager_us=49.0, host_us=45.0),
        timed(TOY, GPU_FAST, LARGE, 48.0, eager_us=51.0),
    )
    table = load_or_build(TOY, trace_set, CPU, "cpu", rank_by="eager")
    small, large = table.entries
    assert (small.winner, small.ranked_by) == (GPU_FAST.name, "eager")
    assert small.margin_ms == pytest.approx((1.5 * 45.0 - 51.0) * 1e-3)
    assert (large.winner, large.ranked_by) == (LAUNCH_FAST.name, "eager")
    assert large.margin_ms == pytest.approx(2e-3)
    gpu = load_or_build(TOY, trace_set, CPU, "cpu", rank_by="gpu")
    assert gpu.entries[0].winner == LAUNCH_FAST.name  # GPU time: 47 against 48 us


def test_apply_chooses_by_eager_call_time_outside_graph_capture() -> None:
    kernelarena.enable_apply(measured())
    assert toy(torch.zeros(4, 8), 2.0).eq(2).all()  # LAUNCH_FAST: 8 us a call against 20
    assert toy(torch.zeros(64, 8), 2.0).eq(1).all()
    kernelarena.enable_apply(measured(), rank_by="gpu")
    assert toy(torch.zeros(4, 8), 2.0).eq(1).all()  # GPU_FAST: 2 us of GPU time against 5


def test_the_environment_chooses_the_ranking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELARENA_RANK_BY", "gpu")
    kernelarena.enable_apply(measured())
    assert toy(torch.zeros(4, 8), 2.0).eq(1).all()
    monkeypatch.setenv("KERNELARENA_RANK_BY", "fastest")
    with pytest.raises(ValueError, match="rank_by"):
        kernelarena.enable_apply(measured())


def test_inside_graph_capture_gpu_time_decides_and_costs_only_where_rankings_differ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CPU tensor is never captured; the capture query is replaced to play a GPU's."""
    capturing = [False]
    queries: list[bool] = []

    def query() -> bool:
        queries.append(capturing[0])
        return capturing[0]

    monkeypatch.setattr(calls, "capture_check", lambda device: query)
    kernelarena.enable_apply(measured())
    small, large = torch.zeros(4, 8), torch.zeros(64, 8)
    assert toy(small, 2.0).eq(2).all()
    capturing[0] = True
    assert toy(small, 2.0).eq(1).all()
    asked = len(queries)
    assert toy(large, 2.0).eq(1).all() and len(queries) == asked  # one winner: never asked


def test_traces_timed_while_compiling_are_not_admitted() -> None:
    trace_set = measured()
    compiling = timed(TOY, GPU_FAST, workload(TOY, rows=512, cols=8), 1.0, eager_us=1.0)
    assert compiling.evaluation is not None and compiling.evaluation.performance is not None
    setattr(compiling.evaluation.performance, "compiles_while_timed", 2)  # noqa: B010
    add(trace_set, compiling, timed(TOY, LAUNCH_FAST, compiling.workload, 9.0, eager_us=9.0))
    entries = load_or_build(TOY, trace_set, CPU, "cpu").entries
    assert [(e.key, [m.solution for m in e.ranked]) for e in entries][-1] == (
        (512, 8),
        [LAUNCH_FAST.name],
    )
