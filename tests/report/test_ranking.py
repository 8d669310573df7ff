"""What the report computes from traces: latest traces, leaderboards, kernels against peers."""

from __future__ import annotations

import math

import pytest

from kernelarena.report.html.ranking import contest, leaderboard, rank_definitions
from kernelarena.report.html.shapes import ShapeAxes, shape_axes, short_labels
from kernelarena.report.html.views import collect, log_head
from tests.report.synthetic import H100, H200, definition, solution, timed, toy_trace_set, workload


def test_latest_trace_per_slot_replaces_an_older_failure() -> None:
    made = toy_trace_set()
    norm = next(r for r in collect(made, list(made.definitions.values())) if r.name == "toy_norm")
    measured = norm.by_hardware[H100]
    assert measured.passed == {"toy_norm_triton": 3, "toy_norm_cuda": 3, "toy_norm_torch": 3}
    assert measured.failed == {} and measured.failures == []
    assert norm.provenance[H100].traces == 9 and norm.provenance[H100].outdated == 0


def test_leaderboard_geomean_spread_and_order() -> None:
    made = toy_trace_set()
    norm = collect(made, [made.definitions["toy_norm"]])[0]
    standings = leaderboard(norm, norm.by_hardware[H100])
    assert [s.solution for s in standings] == ["toy_norm_triton", "toy_norm_cuda", "toy_norm_torch"]
    triton = standings[0]
    assert triton.speedup is not None and triton.ceiling is not None
    assert triton.speedup.center == pytest.approx((20 * 2.5 * (1 / 3)) ** (1 / 3))
    assert (triton.speedup.low, triton.speedup.high) == pytest.approx((1 / 3, 20))
    assert (triton.kind, triton.language, triton.author) == ("kernel", "triton", "author-triton")
    assert (triton.passed, triton.failed, triton.timed, triton.fastest) == (3, 0, 3, 2)
    assert standings[1].fastest == 1 and standings[2].fastest == 0
    assert standings[2].kind == "peer"


def test_kernels_against_peers() -> None:
    made = toy_trace_set()
    norm = collect(made, [made.definitions["toy_norm"]])[0]
    result = contest(norm, norm.by_hardware[H200])
    assert (result.workloads, result.beaten) == (3, 3)
    assert result.advantage == pytest.approx(math.prod([2.0, 2.0, 2.4]) ** (1 / 3))
    assert (result.best_kernel, result.best_peer) == ("toy_norm_triton", "toy_norm_torch")


def test_a_kernel_within_a_peers_spread_does_not_beat_it() -> None:
    made = toy_trace_set()
    norm_definition = made.definitions["toy_norm"]
    shape = workload(128, 4096)
    close = solution("toy_norm", "torch", "python")
    kernel = solution("toy_norm", "triton", "triton")
    made.traces["toy_norm"] = [
        timed(norm_definition, kernel, shape, H100, 10.0, spread=0.05),
        timed(norm_definition, close, shape, H100, 10.6, spread=0.05),  # p20 10.07 < p80 10.5
    ]
    norm = collect(made, [norm_definition])[0]
    result = contest(norm, norm.by_hardware[H100])
    assert (result.workloads, result.beaten) == (1, 0)
    assert result.advantage == pytest.approx(1.06)


def test_summary_ranks_and_a_definition_with_only_failures() -> None:
    made = toy_trace_set()
    collected = collect(made, list(made.definitions.values()))
    ranks = rank_definitions(collected, H100)
    assert [r.definition for r in ranks] == ["toy_norm", "toy_broken"]
    broken = ranks[1]
    assert broken.leader is None and broken.contest.advantage is None
    assert (broken.passed, broken.failed) == (0, 1)


def test_hardware_filter_keeps_only_that_models_traces() -> None:
    made = toy_trace_set()
    collected = collect(made, list(made.definitions.values()), hardware=[H200])
    assert all(list(r.by_hardware) == [H200] for r in collected)
    assert [r.name for r in collected] == ["toy_broken", "toy_norm"]


def test_shape_axes_lines_and_axes_that_change_along() -> None:
    made = toy_trace_set()
    norm = collect(made, [made.definitions["toy_norm"]])[0]
    points = norm.by_hardware[H100].points
    # hidden is 4096 throughout: one line per solution along rows.
    assert shape_axes(norm.definition, points) == ShapeAxes("rows", [], [])
    grid = definition("grid")
    kernel = solution("grid", "cuda", "cuda")
    made_grid = toy_trace_set()
    made_grid.add_definition(grid, persist=False)
    made_grid.traces["grid"] = [
        timed(grid, kernel, workload(r, h), H100, 1.0) for r in (1, 2, 4) for h in (64, 128)
    ]
    full_grid = collect(made_grid, [grid])[0].by_hardware[H100].points
    assert shape_axes(grid, full_grid) == ShapeAxes("rows", ["hidden"], [])
    # hidden grows with rows: one line, and the axis title says hidden changes along.
    made_grid.traces["grid"] = [
        timed(grid, kernel, workload(r, h), H100, 1.0) for r, h in ((1, 64), (2, 64), (4, 128))
    ]
    diagonal = collect(made_grid, [grid])[0].by_hardware[H100].points
    axes = shape_axes(grid, diagonal)
    assert axes == ShapeAxes("rows", [], ["hidden"])
    assert sorted(short_labels(diagonal, axes).values()) == [
        "rows=1, hidden=64",
        "rows=2, hidden=64",
        "rows=4, hidden=128",
    ]


def test_log_head_keeps_the_first_lines() -> None:
    log = "\n\nfirst\nsecond\n" + "\n".join(f"line {i}" for i in range(20))
    head = log_head(log, lines=3)
    assert head == "first\nsecond\nline 0"
    assert len(log_head("x" * 5000, characters=100)) == 100
