"""Which shape axes a plot runs along, and short names for workloads.

A definition's traces often vary several axes at once (rows and hidden), and some axes follow from
others (``k_packed`` from ``k``, derived axes by their expression). A plot runs along the free axis
with the most distinct values; the free axes that still tell workloads apart draw separate lines;
those that change together with the plotted ones are named in the axis title, so a line never
pretends that one axis alone changed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from kernelarena.data import Definition
from kernelarena.report.html.views import Point


@dataclass(frozen=True)
class ShapeAxes:
    x: str | None  # None: no free axis varies; the workloads are categories
    series: list[str]  # free axes that tell lines apart
    along: list[str]  # free axes that change together with x and the series in these traces

    @property
    def varying(self) -> list[str]:
        return ([self.x] if self.x else []) + self.series + self.along


def shape_axes(definition: Definition, points: Sequence[Point]) -> ShapeAxes:
    free = [
        a
        for a, spec in definition.axes.items()
        if spec.type == "var" and not getattr(spec, "expression", None)
    ]
    values = {a: {p.axes.get(a) for p in points} for a in free}
    varying = [a for a in free if len(values[a]) > 1]
    if not varying:
        return ShapeAxes(None, [], [])
    ordered = sorted(varying, key=lambda a: (-len(values[a]), free.index(a)))
    chosen: list[str] = [ordered[0]]
    along: list[str] = []
    for axis in ordered[1:]:
        (along if _determined(axis, chosen, points) else chosen).append(axis)
    return ShapeAxes(chosen[0], chosen[1:], along)


def _determined(axis: str, by: list[str], points: Sequence[Point]) -> bool:
    seen: dict[tuple[int | None, ...], set[int | None]] = defaultdict(set)
    for point in points:
        seen[tuple(point.axes.get(a) for a in by)].add(point.axes.get(axis))
    return all(len(v) == 1 for v in seen.values())


def short_labels(points: Sequence[Point], axes: ShapeAxes) -> dict[str, str]:
    """Workload uuid -> its varying free axes (``m=7168, k=16384, l=1``); the full label where
    those do not tell two workloads apart (they differ in params or fixed axes only)."""
    named = {
        p.workload: ", ".join(f"{a}={p.axes.get(a)}" for a in axes.varying) or p.label
        for p in points
    }
    full = {p.workload: p.label for p in points}
    counts: dict[str, int] = defaultdict(int)
    for label in named.values():
        counts[label] += 1
    return {uuid: label if counts[label] == 1 else full[uuid] for uuid, label in named.items()}
