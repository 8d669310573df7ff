"""The apply table: winners per shape, the spread rule, what is ignored, nearest shapes, the cache."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kernelarena.cli import app
from kernelarena.data import Status
from kernelarena.dispatch.store import load_or_build, table_path
from kernelarena.dispatch.table import bucket, nearest_key
from tests.dispatch.toys import (
    CPU,
    OTHER_GPU,
    add,
    marker,
    timed,
    toy_definition,
    toy_set,
    workload,
)

TOY = toy_definition()
ONE, TWO, THREE = (marker(TOY, v) for v in (1, 2, 3))
SMALL, LARGE = workload(TOY, rows=4, cols=64), workload(TOY, rows=4096, cols=4096)


def measured(*traces):  # type: ignore[no-untyped-def]
    trace_set = toy_set(TOY, solutions=[ONE, TWO, THREE])
    add(trace_set, *traces)
    return trace_set


def test_the_lowest_median_wins_each_shape_by_its_margin() -> None:
    trace_set = measured(
        timed(TOY, ONE, SMALL, 5.0),
        timed(TOY, TWO, SMALL, 9.0),
        timed(TOY, THREE, SMALL, 12.0),
        timed(TOY, ONE, LARGE, 80.0),
        timed(TOY, TWO, LARGE, 30.0),
    )
    table = load_or_build(TOY, trace_set, CPU, "cpu")
    small, large = table.entries
    assert (small.key, small.winner, small.decided_by) == ((4, 64), ONE.name, "margin")
    assert abs(small.margin_ms - (8.9e-3 - 5.1e-3)) < 1e-9  # TWO's p20 minus ONE's p80
    assert (large.key, large.winner) == ((4096, 4096), TWO.name)
    assert table.choose((4, 64)).solutions == (ONE.name, TWO.name, THREE.name)
    assert table.choose((4096, 4096)).reason == "measured"


def test_overlapping_spreads_are_a_tie_won_by_the_definition_wide_best() -> None:
    other = workload(TOY, rows=64, cols=64)
    trace_set = measured(
        timed(TOY, ONE, SMALL, 5.0, spread_us=0.2),
        timed(TOY, TWO, SMALL, 5.1, spread_us=2.0),  # p20 4.1 <= ONE's p80 5.1: not separated
        timed(TOY, ONE, other, 20.0),
        timed(TOY, TWO, other, 10.0),  # TWO is twice as fast elsewhere: the better rank
    )
    table = load_or_build(TOY, trace_set, CPU, "cpu")
    tie = table._by_key[(4, 64)]
    assert tie.decided_by == "tie" and tie.margin_ms is not None and tie.margin_ms <= 0
    assert tie.winner == TWO.name and table.definition_best == TWO.name
    assert [m.solution for m in tie.ranked] == [ONE.name, TWO.name]  # ONE still the lower median
    apart = measured(timed(TOY, ONE, SMALL, 5.0), timed(TOY, TWO, SMALL, 5.4))
    separated = load_or_build(TOY, apart, CPU, "cpu").entries[0]
    assert (separated.winner, separated.decided_by) == (ONE.name, "margin")


def test_a_solution_whose_graph_failed_never_wins_inside_a_capture() -> None:
    """Timed with events after its CUDA graph failed (``Performance.capturable`` false), the
    fastest solution still wins eager calls; ranked by GPU time, the figure of calls inside a
    capture, it takes no part."""
    uncapturable = timed(TOY, ONE, SMALL, 5.0, eager_us=6.0)
    assert uncapturable.evaluation is not None and uncapturable.evaluation.performance is not None
    uncapturable.evaluation.performance.capturable = False
    trace_set = measured(uncapturable, timed(TOY, TWO, SMALL, 9.0, eager_us=10.0))
    eager = load_or_build(TOY, trace_set, CPU, "cpu", rank_by="eager", use_cache=False)
    assert eager.choose((4, 64)).solutions == (ONE.name, TWO.name)
    graph = load_or_build(TOY, trace_set, CPU, "cpu", rank_by="gpu", use_cache=False)
    assert graph.choose((4, 64)).solutions == (TWO.name,)


def test_traces_from_other_hardware_stale_hashes_or_failures_are_ignored() -> None:
    edited = marker(TOY, 2)
    edited.sources[0].content += "# edited after it was measured\n"
    moved = workload(TOY, rows=4, cols=64)
    moved_again = moved.model_copy(update={"axes": {"rows": 8, "cols": 64}})
    trace_set = measured(
        timed(TOY, ONE, SMALL, 50.0),
        timed(TOY, TWO, SMALL, 1.0, hardware=OTHER_GPU),  # fastest, elsewhere
        timed(TOY, THREE, SMALL, 1.0, status=Status.INCORRECT_NUMERICAL),
    )
    stale_definition = TOY.model_copy(update={"reference": TOY.reference + "# changed\n"})
    add(trace_set, timed(stale_definition, THREE, SMALL, 2.0))
    add(trace_set, timed(TOY, edited, SMALL, 2.0))  # TWO's hash today differs from this one's
    table = load_or_build(TOY, trace_set, CPU, "cpu")
    assert [(e.key, e.winner) for e in table.entries] == [((4, 64), ONE.name)]
    assert [m.solution for m in table.entries[0].ranked] == [ONE.name]
    # a workload edited after its trace: the trace no longer describes the dataset's workload
    trace_set.workloads[TOY.name] = [
        moved_again if w.uuid == moved.uuid else w for w in trace_set.workloads[TOY.name]
    ]
    assert load_or_build(TOY, trace_set, CPU, "cpu").entries == []


def test_nearest_measured_shape_then_definition_best_then_fallback() -> None:
    trace_set = measured(
        timed(TOY, ONE, SMALL, 5.0),
        timed(TOY, TWO, SMALL, 9.0),
        timed(TOY, ONE, LARGE, 90.0),
        timed(TOY, TWO, LARGE, 30.0),
        timed(TOY, TWO, workload(TOY, rows=512, cols=512), 8.0),
    )
    table = load_or_build(TOY, trace_set, CPU, "cpu")
    near = table.choose((5, 100))  # buckets (3, 7) against (3, 7)
    assert (near.reason, near.measured_key, near.solutions[0]) == ("nearest", (4, 64), ONE.name)
    assert table.choose((2048, 8191)).measured_key == (4096, 4096)  # (12, 13) against (13, 13)
    far = table.choose((100_000, 3))
    assert far.reason == "definition_best" and far.solutions[0] == TWO.name
    empty = load_or_build(TOY, toy_set(TOY, solutions=[ONE]), CPU, "cpu")
    assert empty.choose((4, 64)).reason == "fallback" and empty.choose((4, 64)).solutions == ()
    assert [bucket(v) for v in (0, 1, 2, 3, 4, 7, 8)] == [0, 1, 2, 2, 3, 3, 4]
    # fewer buckets apart first; within a bucket, the closer ratio of values
    assert nearest_key((6,), [(4,), (8,)]) == (4,)
    assert nearest_key((6,), [(4,), (7,)]) == (7,)
    assert nearest_key((5,), [(4,), (7,)]) == (4,)


def test_the_disk_cache_is_used_only_when_whole_current_and_unaltered(cache: Path) -> None:
    trace_set = measured(timed(TOY, ONE, SMALL, 5.0), timed(TOY, TWO, SMALL, 9.0))
    first = load_or_build(TOY, trace_set, CPU, "cpu")
    path = table_path(TOY.name, CPU)
    assert path.is_file() and path.is_relative_to(cache)
    assert load_or_build(TOY, trace_set, CPU, "cpu") == first
    path.write_text('{"format": 1, "definition": "toy_fp32", "entr')  # cut short
    assert load_or_build(TOY, trace_set, CPU, "cpu") == first
    tampered = json.loads(path.read_text())
    tampered["entries"][0]["winner"] = TWO.name
    path.write_text(json.dumps(tampered))
    assert load_or_build(TOY, trace_set, CPU, "cpu").entries[0].winner == ONE.name
    assert json.loads(path.read_text())["entries"][0]["winner"] == ONE.name  # rewritten
    add(trace_set, timed(TOY, TWO, SMALL, 1.0))  # a newer, faster trace: the digest changes
    assert load_or_build(TOY, trace_set, CPU, "cpu").entries[0].winner == TWO.name


def test_dispatch_show_prints_the_table(tmp_path: Path) -> None:
    trace_set = measured(timed(TOY, ONE, SMALL, 5.0), timed(TOY, TWO, SMALL, 9.0))
    trace_set.save(tmp_path / "dataset")
    result = CliRunner().invoke(
        app, ["dispatch", "show", "toy", "--dataset", str(tmp_path / "dataset")]
    )
    assert result.exit_code == 0, result.output
    assert (
        "rows=4, cols=64" in result.output and "m1" in result.output and "margin" in result.output
    )
    unknown = CliRunner().invoke(app, ["dispatch", "show", "no_such_op"])
    assert unknown.exit_code == 2
