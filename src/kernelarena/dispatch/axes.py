"""Axis values of a call, also when a free axis appears in no shape but through derived ones.

``Definition.axes_from_shapes`` binds the axes the input shapes name. Packed layouts name only
derived axes: NVFP4's ``k`` is seen as ``k_packed = k // 2`` and ``k_scales = k // 16``. Such an
axis is solved here: every expression in one unknown built from the allowed arithmetic is
non-decreasing in it over the whole numbers (``//``, ``*`` by positive numbers, ``ceil_div``), so
its preimage of the observed value is a run of consecutive values, found by bisection; the runs
of every derived axis that uses it are intersected, and the definition's constraints pick among
what remains. More than one survivor is an error that says so.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from kernelarena.data import AxisVar, Definition
from kernelarena.data.definition import AxisError
from kernelarena.data.expressions import ExpressionError, evaluate, names

_LIMIT = 1 << 40  # no tensor dimension is larger
_RUN = 4096  # longest run of values kept per expression (k // 4096 would be a wider one)


def bind_axes(
    definition: Definition, shapes: Mapping[str, tuple[int, ...] | None]
) -> dict[str, int]:
    try:
        return definition.axes_from_shapes(shapes)
    except AxisError as error:
        if "missing values for var axes" not in str(error):
            raise
        solved = _solve_hidden(definition, shapes)
        if solved is None:
            raise
        return solved


def _observed(
    definition: Definition, shapes: Mapping[str, tuple[int, ...] | None]
) -> dict[str, int]:
    seen: dict[str, int] = {}
    for name, spec in definition.inputs.items():
        for axis, size in zip(spec.shape or [], shapes.get(name) or (), strict=False):
            seen.setdefault(axis, int(size))
    return seen


def _preimage(expression: str, axis: str, known: Mapping[str, int], target: int) -> range:
    def at(value: int) -> float:
        return float(evaluate(expression, {**known, axis: value}))

    low, high = 0, 1
    while at(high) < target and high < _LIMIT:
        high *= 2
    while low < high:  # the smallest value reaching the target
        middle = (low + high) // 2
        if at(middle) < target:
            low = middle + 1
        else:
            high = middle
    end = low
    while end < low + _RUN and at(end) == target:
        end += 1
    return range(low, end)


def _solve_hidden(
    definition: Definition, shapes: Mapping[str, tuple[int, ...] | None]
) -> dict[str, int] | None:
    seen = _observed(definition, shapes)
    known = {
        **definition.const_axes,
        **{a: v for a, v in seen.items() if a in definition.free_axes},
    }
    hidden = [a for a in definition.free_axes if a not in known]
    expressions = {
        n: a.expression
        for n, a in definition.axes.items()
        if isinstance(a, AxisVar) and a.expression and n in seen
    }
    options: list[list[int]] = []
    for axis in hidden:
        runs = [
            set(_preimage(text, axis, known, seen[derived]))
            for derived, text in expressions.items()
            if names(text) - set(known) == {axis}
        ]
        if not runs:
            return None
        options.append(sorted(set.intersection(*runs)))
    found = []
    for values in itertools.product(*options):
        given = {**{a: v for a, v in known.items() if a in definition.free_axes}}
        given.update(zip(hidden, values, strict=True))
        given.update((n, seen[n]) for n in expressions)
        try:
            found.append(definition.resolve_axes(given))
        except (AxisError, ExpressionError):
            continue
    if len(found) > 1:
        shown = sorted({tuple(f[a] for a in hidden) for f in found})[:4]
        raise AxisError(
            f"arguments of '{definition.name}': axes {hidden} are not fixed by the shapes "
            f"(candidates {shown})"
        )
    return found[0] if found else None
