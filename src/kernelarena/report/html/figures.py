"""Plotly figures of the report, as JSON-ready dicts (the page draws them with the inlined plotly.js).

Each figure leaves its template out: the page holds one template for all of them, which keeps a
report of a few hundred figures small.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative

from kernelarena.report.html.ranking import DefinitionRank
from kernelarena.report.html.shapes import ShapeAxes, shape_axes, short_labels
from kernelarena.report.html.views import DefinitionResults, HardwareResults, Point

Figure = dict[str, Any]
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star")


def _latency(point: Point) -> float | None:
    return point.latency_us


def _gbps(point: Point) -> float | None:
    return point.gbps


def _tflops_of(point: Point) -> float | None:
    return point.tflops


METRICS: tuple[tuple[str, Callable[[Point], float | None]], ...] = (
    ("latency (us)", _latency),
    ("GB/s", _gbps),
    ("TFLOP/s", _tflops_of),
)
KERNEL_COLOUR, MIXED_COLOUR, PEER_COLOUR = "#2ca02c", "#ff7f0e", "#7f7f7f"


def to_json(figure: go.Figure) -> Figure:
    payload: Figure = json.loads(pio.to_json(figure, validate=False, remove_uids=True))
    payload.get("layout", {}).pop("template", None)
    return payload


def template() -> Figure:
    """The template every figure of the page is drawn with."""
    payload: Figure = pio.templates["plotly_white"].to_plotly_json()
    return payload


def colours(solutions: Sequence[str]) -> dict[str, str]:
    """One colour per solution, the same in every figure of a definition."""
    palette = qualitative.Plotly if len(solutions) <= 10 else qualitative.Dark24
    return {s: palette[i % len(palette)] for i, s in enumerate(sorted(solutions))}


def _layout(title: str, height: int = 440, **more: Any) -> dict[str, Any]:
    layout: dict[str, Any] = dict(
        title=dict(text=title, x=0.01, font=dict(size=14)),
        height=height,
        margin=dict(l=60, r=20, t=80, b=60),
        legend=dict(font=dict(size=11)),
        hovermode="closest",
    )
    layout.update(more)
    return layout


def performance_figure(
    results: DefinitionResults, measured: HardwareResults, palette: dict[str, str]
) -> Figure | None:
    """Latency (or GB/s, TFLOP/s: a menu switches) against the shape axis, one line per solution
    and combination of the series axes; log scales. None when nothing was timed."""
    points = measured.points
    if not points:
        return None
    axes = shape_axes(results.definition, points)
    by_line: dict[tuple[str, tuple[int | None, ...]], list[Point]] = {}
    for point in points:
        combination = tuple(point.axes.get(a) for a in axes.series)
        by_line.setdefault((point.solution, combination), []).append(point)
    combinations = sorted({c for _, c in by_line}, key=_sortable)
    labels = short_labels(points, axes)
    figure = go.Figure()
    drawn: list[list[Point]] = []
    for (solution, combination), line in sorted(by_line.items(), key=lambda i: _sortable(i[0])):
        line.sort(key=lambda p: (p.axes.get(axes.x or "", 0), p.label))
        drawn.append(line)
        style = combinations.index(combination)
        suffix = ", ".join(f"{a}={v}" for a, v in zip(axes.series, combination, strict=True))
        figure.add_scatter(
            x=[p.axes.get(axes.x) if axes.x else labels[p.workload] for p in line],
            y=[p.latency_us for p in line],
            error_y=_latency_spread(line),
            mode="lines+markers" if axes.x else "markers",
            name=results.short(solution) + (f" ({suffix})" if suffix else ""),
            legendgroup=solution,
            line=dict(color=palette[solution], dash=DASHES[style % len(DASHES)]),
            marker=dict(symbol=SYMBOLS[style % len(SYMBOLS)], size=7),
            text=[_hover(results, p, measured.on_cpu) for p in line],
            hovertemplate="%{text}<extra></extra>",
        )
    _add_reference(figure, points, axes.x)
    title = f"{results.name} on {measured.hardware}"
    yaxis: dict[str, Any] = dict(title=dict(text="latency (us)"), type="log")
    menus = [_metric_menu(drawn)]
    if measured.on_cpu:  # a check: the times of a shared CPU, whose noise would set the scale
        title += f"<br><sup>{CPU_PLOT_NOTE}</sup>"
        yaxis["range"] = middle_range([p.latency_us for p in points])
        menus = []
    figure.update_layout(
        _layout(title, xaxis=_shape_axis(axes, points), yaxis=yaxis, updatemenus=menus)
    )
    return to_json(figure)


CPU_PLOT_NOTE = (
    "CPU check, not a ranking: medians with p20-p80 bars; the scale spans the middle 90% of the "
    "medians, so noise spikes run off it"
)


def middle_range(values: Sequence[float], percent: int = 90) -> list[float]:
    """A log10 axis range over the middle ``percent`` of ``values``, with a factor 2 of margin."""
    ordered = sorted(v for v in values if v > 0) or [1.0]
    cut = len(ordered) * (100 - percent) // 200  # from either end
    low, high = ordered[cut], ordered[len(ordered) - 1 - cut]
    return [math.log10(low / 2), math.log10(high * 2)]


def _shape_axis(axes: ShapeAxes, points: Sequence[Point]) -> dict[str, Any]:
    """Log scale along a shape axis (linear when a value is 0, an empty batch); the axes that
    change with it named in the title."""
    if axes.x is None:
        return dict(title=dict(text="workload"), type="category")
    title = axes.x + (f" (with it: {', '.join(axes.along)})" if axes.along else "")
    positive = all((p.axes.get(axes.x) or 0) > 0 for p in points)
    return dict(title=dict(text=title), type="log" if positive else "linear")


def _sortable(value: object) -> str:
    return json.dumps(value, default=str)


def _latency_spread(line: Sequence[Point]) -> dict[str, Any]:
    if any(p.p20_us is None or p.p80_us is None for p in line):
        return dict(visible=False)
    return dict(
        type="data",
        symmetric=False,
        array=[max(0.0, (p.p80_us or 0) - p.latency_us) for p in line],
        arrayminus=[max(0.0, p.latency_us - (p.p20_us or 0)) for p in line],
        thickness=1,
        width=3,
    )


def _hover(results: DefinitionResults, point: Point, checks_only: bool = False) -> str:
    spread = ""
    if point.p20_us is not None and point.p80_us is not None:
        spread = f" (p20-p80 {point.p20_us:.4g}-{point.p80_us:.4g})"
    lines = [
        f"<b>{results.short(point.solution)}</b>",
        point.label,
        f"{point.latency_us:.4g} us{spread}",
    ]
    if checks_only:
        return "<br>".join(lines)
    if point.speedup:
        lines.append(f"{point.speedup:.2f}x the reference")
    rates = [f"{point.gbps:.4g} GB/s" if point.gbps else "", _tflops(point.tflops)]
    if any(rates):
        lines.append(", ".join(r for r in rates if r))
    if point.ceiling_fraction is not None:
        lines.append(f"{point.ceiling_fraction:.0%} of the ceiling")
    return "<br>".join(lines)


def _tflops(value: float | None) -> str:
    return f"{value:.4g} TFLOP/s" if value else ""


def _add_reference(figure: go.Figure, points: Sequence[Point], x_axis: str | None) -> None:
    """The reference's latency, measured beside each solution (the median of its figures)."""
    by_workload: dict[str, list[Point]] = {}
    for point in points:
        if point.reference_us:
            by_workload.setdefault(point.workload, []).append(point)
    if not by_workload or x_axis is None:
        return
    firsts = sorted(
        (g[0] for g in by_workload.values()), key=lambda p: (p.axes.get(x_axis), p.label)
    )
    middle = [sorted(p.reference_us or 0 for p in by_workload[f.workload]) for f in firsts]
    figure.add_scatter(
        x=[p.axes.get(x_axis) for p in firsts],
        y=[m[len(m) // 2] for m in middle],
        mode="markers",
        name="reference (float32)",
        marker=dict(color="#bbbbbb", symbol="line-ew-open", size=14),
        text=[f"reference on {p.label}" for p in firsts],
        hovertemplate="%{text}<br>%{y:.4g} us<extra></extra>",
        visible="legendonly",
    )


def _metric_menu(lines: Sequence[Sequence[Point]]) -> dict[str, Any]:
    """Buttons that switch every solution's line (the first ``len(lines)`` traces) between the
    metrics that have values; the p20-p80 bars belong to latency only."""
    buttons = []
    points = [p for line in lines for p in line]
    for label, value in METRICS:
        if not any(value(p) for p in points):
            continue
        latency = label.startswith("latency")
        restyle = {
            "y": [[value(p) for p in line] for line in lines],
            "error_y": [
                _latency_spread(line) if latency else dict(visible=False) for line in lines
            ],
        }
        buttons.append(
            dict(
                label=label,
                method="update",
                args=[restyle, {"yaxis.title.text": label}, list(range(len(lines)))],
            )
        )
    # In the top margin at the right, clear of the title at the left.
    return dict(
        buttons=buttons,
        direction="right",
        type="buttons",
        x=1.0,
        xanchor="right",
        y=1.03,
        yanchor="bottom",
        font=dict(size=11),
    )


def ceiling_figure(
    results: DefinitionResults, measured: HardwareResults, palette: dict[str, str]
) -> Figure | None:
    """The fraction of the hardware ceiling (copy bandwidth or matmul rate, whichever bounds the
    workload) each solution reached, per workload; None when no trace has one."""
    points = [p for p in measured.points if p.ceiling_fraction is not None]
    if not points:
        return None
    axes = shape_axes(results.definition, points)
    short = short_labels(points, axes)
    order = sorted(
        {(tuple(p.axes.get(a) or 0 for a in axes.varying), short[p.workload]) for p in points}
    )
    labels = [label for _, label in order]
    figure = go.Figure()
    for solution in sorted({p.solution for p in points}):
        mine = {short[p.workload]: p for p in points if p.solution == solution}
        figure.add_bar(
            x=labels,
            y=[_percent(mine.get(label)) for label in labels],
            name=results.short(solution),
            marker_color=palette[solution],
            hovertemplate=f"<b>{results.short(solution)}</b><br>%{{x}}<br>%{{y:.1f}}% of the "
            "ceiling<extra></extra>",
        )
    figure.update_layout(
        _layout(
            f"{results.name} on {measured.hardware}: fraction of the ceiling",
            barmode="group",
            xaxis=dict(title=dict(text="workload"), type="category", tickangle=-20),
            yaxis=dict(title=dict(text="% of the ceiling"), rangemode="tozero"),
        )
    )
    return to_json(figure)


def _percent(point: Point | None) -> float | None:
    if point is None or point.ceiling_fraction is None:
        return None
    return point.ceiling_fraction * 100


def advantage_figure(hardware: str, ranks: Sequence[DefinitionRank]) -> Figure | None:
    """Per definition, how much faster the library's fastest kernel is than the fastest peer
    (geomean over workloads; log scale, 1 = even); green where it beats every peer at every
    workload, orange at some, grey at none."""
    contested = [r for r in ranks if r.contest.advantage is not None]
    if not contested:
        return None
    contested = list(reversed(contested))  # the largest advantage at the top of the chart
    colour = [
        KERNEL_COLOUR
        if r.contest.beaten == r.contest.workloads
        else (MIXED_COLOUR if r.contest.beaten else PEER_COLOUR)
        for r in contested
    ]
    text = [
        f"<b>{r.definition}</b><br>{r.contest.advantage:.2f}x the fastest peer (geomean)"
        f"<br>beats every peer at {r.contest.beaten} of {r.contest.workloads} workloads"
        f"<br>kernel: {r.contest.best_kernel}<br>peer: {r.contest.best_peer}"
        for r in contested
    ]
    figure = go.Figure(
        go.Bar(  # from 1 (even) to the advantage, so slower kernels point left
            x=[(r.contest.advantage or 1.0) - 1.0 for r in contested],
            base=1.0,
            y=[r.definition for r in contested],
            orientation="h",
            marker_color=colour,
            text=text,
            textposition="none",
            hovertemplate="%{text}<extra></extra>",
        )
    )
    figure.add_vline(x=1.0, line=dict(color="#444444", dash="dot"))
    figure.update_layout(
        _layout(
            f"Library kernels against their peers on {hardware}<br><sup>green: faster than "
            "every peer at every workload; orange: at some; grey: at none</sup>",
            height=170 + 22 * len(contested),
            margin=dict(l=60, r=20, t=105, b=30),
            # On top: the chart is tall and is read from the top.
            xaxis=dict(
                title=dict(text="fastest peer time / fastest kernel time"), type="log", side="top"
            ),
            yaxis=dict(type="category", automargin=True),
            showlegend=False,
        )
    )
    return to_json(figure)


def model_figure(title: str, labels: Sequence[str], timings: Sequence[dict[str, float]]) -> Figure:
    """Milliseconds per forward pass, one bar per setting (apply off, apply on), p20-p80 bars."""
    figure = go.Figure(
        go.Bar(
            x=list(labels),
            y=[t["median_ms"] for t in timings],
            error_y=dict(
                type="data",
                symmetric=False,
                array=[t["p80_ms"] - t["median_ms"] for t in timings],
                arrayminus=[t["median_ms"] - t["p20_ms"] for t in timings],
            ),
            marker_color=[PEER_COLOUR, KERNEL_COLOUR, MIXED_COLOUR][: len(labels)],
            hovertemplate="%{x}: %{y:.4g} ms per forward<extra></extra>",
        )
    )
    figure.update_layout(
        _layout(
            title, height=380, yaxis=dict(title=dict(text="ms per forward"), rangemode="tozero")
        )
    )
    return to_json(figure)
