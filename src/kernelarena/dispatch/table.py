"""ApplyTable: for one definition on one hardware model, which solution to call at each shape.

The rules, in the order they apply (docs/apply.md says the same for users):

1. Admitted traces (``admit.py``): status PASSED with a performance record taken without
   compiling; hardware equal to the device's (``environment.hardware``), or where it has none, the
   nearest measured model of the same architecture's (``borrow.py``); content hashes present and
   equal to today's definition, solution and workload (a workload no longer in the dataset is
   checked against the copy inside the trace); on a CPU only Python solutions that target ``cpu``
   (Triton runs on a CPU only under its interpreter, which a production process does not use);
   ranked by GPU time (inside a CUDA graph), none whose graph failed when it was measured
   (``Performance.capturable``).
2. Shape key: the values of the definition's free var axes, in declaration order (derived axes
   follow from them), then the value (0 or 1) of each boolean scalar input: such a flag selects a
   variant of the computation (attention's causal mask does half the work), while numeric scalars
   (eps, scales) leave the work as it is and stay out of the key.
3. One measurement per (solution, key): per workload the latest trace; across workloads at the
   same key (re-runs, workloads that differ only in params such as a row stride) the median of
   their medians, and likewise of their 20th and 80th percentiles and eager per-call times.
   The figure that ranks (``rank_by``): ``eager``, the per-call wall time of an eager loop (host
   launch included: what a caller outside CUDA graph capture pays), at keys where every candidate
   has one, else the GPU time; ``gpu``, the GPU time (what a call costs inside a captured graph).
   Where every candidate also has a host submit time (the host time of a call that returns before
   the GPU finishes), the eager figure is ``max(eager, HOST_FACTOR x submit)``: the eager time on a
   host ``HOST_FACTOR`` times slower than the one measured, so that a choice one slow host away
   from host-bound (a Triton launch whose 45 us hid under 47 us of GPU work) loses to one that
   is not. An eager figure has no recorded spread: its interval is of width zero.
4. Winner at a key: the lowest median wins outright when its interval [p20, p80] lies below every
   other candidate's, i.e. ``other.p20 - best.p80 > 0`` for all others (the margin): its median
   beats each other's by more than the two spreads that face each other. Traces without
   percentiles count as intervals of width zero.
5. A tie (no outright winner): among the best and every candidate whose p20 is at or below the
   best's p80, the one ranked highest definition-wide (rule 6). Fewer distinct kernels across
   shapes, and the choice does not flip with noise.
6. Definition-wide rank: score = geometric mean, over the keys a solution was measured at, of
   (best median at that key / its median) of the figure that ranked the key, so 1.0 means
   fastest everywhere it ran. The definition-wide best is the highest score among the solutions
   measured at the most keys.
7. A key never measured: the nearest measured key by power-of-two buckets (``bucket(v) =
   v.bit_length()``, so 0, 1, 2-3, 4-7, ...); a measured key is near when every flag is equal
   and every axis is within ``NEAR_BUCKETS`` buckets; the nearest has the smallest sum of bucket
   distances, then the smallest sum of |log2| ratios of the values, then the smallest key. No
   near key: the definition-wide best. Nothing measured: the fallback.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, PrivateAttr

from kernelarena.data import Definition, Workload

FORMAT = 5
NEAR_BUCKETS = 1
# Rule 3: the eager figure is the eager time on a host this much slower than the measured one. The
# same call's host cost differed by up to 2x between the lent GPU machines (a tvm-ffi launch 7.3
# to 14 us, a Triton launch under 47 us on one H100 host and 93-117 us on others); 1.5 is the
# middle of that spread, which costs the measured host little where a host-bound choice beats a
# GPU-bound one by more than 1.5x.
HOST_FACTOR = 1.5
Key = tuple[int, ...]
RankBy = Literal["eager", "gpu"]


class Measurement(BaseModel):
    solution: str
    median_ms: float  # GPU time, as are p20 and p80
    p20_ms: float
    p80_ms: float
    eager_ms: float | None = None  # per-call wall time of an eager loop
    host_ms: float | None = None  # host submit time of a call (``Performance.host_submit_ms``)
    workloads: int = 1
    capturable: bool = True  # False: its graph failed when measured (``Performance.capturable``)

    def interval(self, by: RankBy) -> tuple[float, float, float]:
        """(median, p20, p80) of the figure ``by``; an eager figure (rule 3) has no spread."""
        if by == "eager" and self.eager_ms is not None:
            figure = self.eager_ms
            if self.host_ms is not None:
                figure = max(figure, HOST_FACTOR * self.host_ms)
            return figure, figure, figure
        return self.median_ms, self.p20_ms, self.p80_ms


class KeyEntry(BaseModel):
    key: Key
    winner: str
    decided_by: Literal["only", "margin", "tie"]
    ranked_by: RankBy = "gpu"
    margin_ms: float | None = None
    ranked: list[Measurement]


@dataclass(frozen=True)
class Choice:
    """Solutions to try in order (the first that builds runs), and why."""

    solutions: tuple[str, ...]
    reason: Literal["measured", "nearest", "definition_best", "fallback"]
    measured_key: Key | None = None


class ApplyTable(BaseModel):
    format: int = FORMAT
    definition: str
    hardware: str
    rank_by: RankBy = "gpu"
    borrowed_from: str | None = None  # the measured model whose traces decide, when not its own
    axes: list[str]
    flags: list[str] = []  # boolean scalar inputs, after the axes in every key
    digest: str
    entries: list[KeyEntry]
    scores: dict[str, float]
    coverage: dict[str, int]
    definition_best: str | None
    checksum: str = ""
    _by_key: dict[Key, KeyEntry] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: object, /) -> None:
        self._by_key = {tuple(e.key): e for e in self.entries}

    def ranking(self) -> list[str]:
        """Solutions by definition-wide rank (rule 6), best first."""
        top = max(self.coverage.values(), default=0)
        return sorted(
            self.scores,
            key=lambda s: (self.coverage[s] < top, -self.scores[s], -self.coverage[s], s),
        )

    def choose(self, key: Key) -> Choice:
        entry = self._by_key.get(key)
        if entry is not None:
            return Choice(_winner_first(entry), "measured", entry.key)
        near = nearest_key(key, self._by_key, len(self.flags))
        if near is not None:
            return Choice(_winner_first(self._by_key[near]), "nearest", near)
        if self.definition_best is not None:
            return Choice(tuple(self.ranking()), "definition_best")
        return Choice((), "fallback")


def _winner_first(entry: KeyEntry) -> tuple[str, ...]:
    others = [m.solution for m in entry.ranked if m.solution != entry.winner]
    return (entry.winner, *others)


def bucket(value: int) -> int:
    return int(value).bit_length()


def nearest_key(key: Key, measured: Iterable[Key], flags: int = 0) -> Key | None:
    """The nearest of ``measured`` by rule 7; the last ``flags`` values of a key must be equal."""
    if flags:
        sized = len(key) - flags
        same = [k for k in measured if len(k) == len(key) and k[sized:] == key[sized:]]
        found = nearest_key(key[:sized], [k[:sized] for k in same])
        return None if found is None else found + key[sized:]

    def distance(other: Key) -> tuple[int, float, Key]:
        buckets = sum(abs(bucket(a) - bucket(b)) for a, b in zip(key, other, strict=True))
        ratios = sum(abs(math.log2((a + 1) / (b + 1))) for a, b in zip(key, other, strict=True))
        return buckets, ratios, other

    near = [
        k
        for k in measured
        if len(k) == len(key)
        and all(abs(bucket(a) - bucket(b)) <= NEAR_BUCKETS for a, b in zip(key, k, strict=True))
    ]
    return min(near, key=distance) if near else None


def flag_inputs(definition: Definition) -> list[str]:
    """The boolean scalar inputs, whose values are part of the key (rule 2)."""
    return [
        name
        for name, spec in definition.inputs.items()
        if spec.shape is None and spec.dtype.python_type is bool
    ]


def shape_key(
    definition: Definition, axes: Mapping[str, int], flags: Mapping[str, Any] | None = None
) -> Key:
    """Rule 2: the free axes' values, then each boolean scalar input's (``flags``, by input
    name; one not given counts as False)."""
    key = tuple(int(axes[name]) for name in definition.free_axes)
    names = flag_inputs(definition)
    if not names:
        return key
    given = flags or {}
    return key + tuple(int(bool(given.get(name, False))) for name in names)


def workload_key(definition: Definition, workload: Workload) -> Key:
    """Rule 2's key of a workload: its resolved axes and the boolean scalar inputs it sets. Raises
    what ``Definition.resolve_axes`` raises for axes that do not resolve."""
    flags = {}
    for name in flag_inputs(definition):
        given = workload.inputs.get(name)
        flags[name] = bool(getattr(given, "value", False))
    return shape_key(definition, definition.resolve_axes(workload.axes), flags)


def build_table(
    definition: Definition,
    timings: Mapping[Key, list[Measurement]],
    hardware: str,
    digest: str,
    rank_by: RankBy = "gpu",
    borrowed_from: str | None = None,
) -> ApplyTable:
    """Rules 4-6 over the admitted timings, each key ranked by ``rank_by`` where every candidate
    has that figure (rule 3). Ranked by GPU time, the figure of calls inside a CUDA graph, a
    solution whose graph failed when it was measured takes no part (rule 1)."""
    if rank_by == "gpu":
        timings = {k: [m for m in ms if m.capturable] for k, ms in timings.items()}
        timings = {k: ms for k, ms in timings.items() if ms}
    timings = {key: _host_where_all(ms) for key, ms in timings.items()}
    ranked_by = {key: _figure_at(ms, rank_by) for key, ms in timings.items()}
    best_at = {key: min(m.interval(ranked_by[key])[0] for m in ms) for key, ms in timings.items()}
    ratios: dict[str, list[float]] = {}
    for key, measurements in timings.items():
        for m in measurements:
            median = m.interval(ranked_by[key])[0]
            ratio = best_at[key] / median if median > 0 else 1.0
            ratios.setdefault(m.solution, []).append(max(ratio, 1e-12))
    scores = {s: math.exp(statistics.fmean(math.log(r) for r in rs)) for s, rs in ratios.items()}
    coverage = {s: len(rs) for s, rs in ratios.items()}
    table = ApplyTable(
        definition=definition.name,
        hardware=hardware,
        rank_by=rank_by,
        borrowed_from=borrowed_from,
        axes=list(definition.free_axes),
        flags=flag_inputs(definition),
        digest=digest,
        entries=[],
        scores=scores,
        coverage=coverage,
        definition_best=None,
    )
    ranking = table.ranking()
    table.definition_best = ranking[0] if ranking else None
    rank = {name: i for i, name in enumerate(ranking)}
    table.entries = [_decide(key, timings[key], rank, ranked_by[key]) for key in sorted(timings)]
    table.model_post_init(None)
    return table


def _figure_at(measurements: list[Measurement], rank_by: RankBy) -> RankBy:
    """Eager times rank a key only where every candidate has one: an eager time (host launch
    included) against another's GPU time would favour the one without."""
    if rank_by == "eager" and all(m.eager_ms is not None for m in measurements):
        return "eager"
    return "gpu"


def _host_where_all(measurements: list[Measurement]) -> list[Measurement]:
    """Host submit times count at a key only where every candidate has one (rule 3), as eager
    times do: a figure raised by a slower host against one that cannot be would favour the latter."""
    if all(m.host_ms is not None for m in measurements):
        return measurements
    return [m.model_copy(update={"host_ms": None}) for m in measurements]


def _decide(
    key: Key, measurements: list[Measurement], rank: Mapping[str, int], by: RankBy
) -> KeyEntry:
    ranked = sorted(measurements, key=lambda m: (m.interval(by)[0], m.solution))
    best, others = ranked[0], ranked[1:]
    if not others:
        return KeyEntry(
            key=key, winner=best.solution, decided_by="only", ranked_by=by, ranked=ranked
        )
    best_p80 = best.interval(by)[2]
    margin = min(o.interval(by)[1] - best_p80 for o in others)
    if margin > 0:
        return KeyEntry(
            key=key,
            winner=best.solution,
            decided_by="margin",
            ranked_by=by,
            margin_ms=margin,
            ranked=ranked,
        )
    tied = [best, *(o for o in others if o.interval(by)[1] <= best_p80)]
    winner = min(tied, key=lambda m: (rank.get(m.solution, len(rank)), m.solution))
    return KeyEntry(
        key=key,
        winner=winner.solution,
        decided_by="tie",
        ranked_by=by,
        margin_ms=margin,
        ranked=ranked,
    )
