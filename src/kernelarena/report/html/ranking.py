"""Leaderboards and comparisons computed from the collected results.

Two sides are compared on the summary page: the library's own kernels (solutions written in Triton,
CUDA, C++ or TileLang) and their peers, the Python solutions, which call kernels of other libraries
(torch eager, torch.compile, Liger, FlashAttention, cuDNN through SDPA). At a workload the kernels
beat every peer when the fastest kernel's 80th percentile lies below every peer's 20th, the margin
rule apply uses to call a winner (docs/apply.md): faster beyond the spread of either, not by noise.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from kernelarena.data import Language
from kernelarena.report.html.views import DefinitionResults, HardwareResults, Point

Kind = Literal["kernel", "peer", "unknown"]
KERNEL_LANGUAGES = {Language.TRITON, Language.CUDA, Language.CPP, Language.TILELANG}


@dataclass(frozen=True)
class Spread:
    """A central figure and the lowest and highest values it summarises."""

    center: float
    low: float
    high: float


@dataclass(frozen=True)
class Standing:
    """One solution's line in a leaderboard (one definition, one hardware model)."""

    solution: str
    language: str
    author: str
    kind: Kind
    passed: int
    failed: int
    timed: int
    speedup: Spread | None  # geometric mean over timed workloads, with min and max
    ceiling: Spread | None  # median fraction of the hardware ceiling, with min and max
    fastest: int  # workloads at which its median is the lowest


@dataclass(frozen=True)
class Contest:
    """The library's kernels against their peers on one definition and hardware model."""

    hardware: str
    workloads: int  # workloads timed for at least one kernel and one peer
    beaten: int  # of those, where the fastest kernel beats every peer beyond the spread
    advantage: float | None  # geomean over them of (fastest peer / fastest kernel) median time
    best_kernel: str | None  # the kernel fastest at the most of those workloads
    best_peer: str | None


def kind_of(results: DefinitionResults, solution: str) -> Kind:
    known = results.solutions.get(solution)
    if known is None:
        return "unknown"
    return "kernel" if known.spec.language in KERNEL_LANGUAGES else "peer"


def geomean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def leaderboard(results: DefinitionResults, hardware: HardwareResults) -> list[Standing]:
    """Standings, best geomean speedup over the reference first; untimed solutions last."""
    by_solution: dict[str, list[Point]] = defaultdict(list)
    for point in hardware.points:
        by_solution[point.solution].append(point)
    fastest = _fastest_counts(hardware.points)
    standings = []
    for solution in hardware.solutions:
        points = by_solution.get(solution, [])
        known = results.solutions.get(solution)
        speedups = [p.speedup for p in points if p.speedup]
        fractions = [p.ceiling_fraction for p in points if p.ceiling_fraction is not None]
        standings.append(
            Standing(
                solution=solution,
                language=known.spec.language.value if known else "?",
                author=known.author if known else "?",
                kind=kind_of(results, solution),
                passed=hardware.passed.get(solution, 0),
                failed=hardware.failed.get(solution, 0),
                timed=len(points),
                speedup=_spread(speedups, geomean) if speedups else None,
                ceiling=_spread(fractions, statistics.median) if fractions else None,
                fastest=fastest.get(solution, 0),
            )
        )
    return sorted(standings, key=_standing_order)


def _standing_order(standing: Standing) -> tuple[bool, float, int, str]:
    speedup = standing.speedup.center if standing.speedup else 0.0
    return (standing.speedup is None, -speedup, -standing.passed, standing.solution)


def _spread(values: Sequence[float], center: object) -> Spread:
    middle = center(values)  # type: ignore[operator]
    return Spread(float(middle), min(values), max(values))


def _fastest_counts(points: Sequence[Point]) -> dict[str, int]:
    by_workload: dict[str, list[Point]] = defaultdict(list)
    for point in points:
        by_workload[point.workload].append(point)
    counts: dict[str, int] = defaultdict(int)
    for group in by_workload.values():
        counts[min(group, key=lambda p: (p.latency_us, p.solution)).solution] += 1
    return dict(counts)


def contest(results: DefinitionResults, hardware: HardwareResults) -> Contest:
    by_workload: dict[str, dict[Kind, list[Point]]] = defaultdict(lambda: defaultdict(list))
    for point in hardware.points:
        by_workload[point.workload][kind_of(results, point.solution)].append(point)
    ratios: list[float] = []
    beaten = 0
    kernel_wins: dict[str, int] = defaultdict(int)
    peer_wins: dict[str, int] = defaultdict(int)
    for sides in by_workload.values():
        kernels, peers = sides.get("kernel"), sides.get("peer")
        if not kernels or not peers:
            continue
        kernel = min(kernels, key=lambda p: p.latency_us)
        peer = min(peers, key=lambda p: p.latency_us)
        kernel_wins[kernel.solution] += 1
        peer_wins[peer.solution] += 1
        ratios.append(peer.latency_us / kernel.latency_us)
        top = kernel.p80_us if kernel.p80_us is not None else kernel.latency_us
        beaten += all((p.p20_us if p.p20_us is not None else p.latency_us) > top for p in peers)
    return Contest(
        hardware=hardware.hardware,
        workloads=len(ratios),
        beaten=beaten,
        advantage=geomean(ratios) if ratios else None,
        best_kernel=_most(kernel_wins),
        best_peer=_most(peer_wins),
    )


def _most(wins: dict[str, int]) -> str | None:
    return max(sorted(wins), key=lambda s: wins[s]) if wins else None


@dataclass(frozen=True)
class DefinitionRank:
    """A definition's line on the summary page for one hardware model."""

    definition: str
    op_type: str
    leader: Standing | None  # the top of its leaderboard
    contest: Contest
    passed: int
    failed: int


def rank_definitions(collected: Sequence[DefinitionResults], hardware: str) -> list[DefinitionRank]:
    """Definitions measured on ``hardware``, the largest advantage of the kernels over their
    peers first; those without a contest (no kernel or no peer timed) after, by name."""
    ranks = []
    for results in collected:
        measured = results.by_hardware.get(hardware)
        if measured is None:
            continue
        standings = leaderboard(results, measured)
        ranks.append(
            DefinitionRank(
                definition=results.name,
                op_type=results.definition.op_type,
                leader=standings[0] if standings and standings[0].timed else None,
                contest=contest(results, measured),
                passed=sum(measured.passed.values()),
                failed=sum(measured.failed.values()),
            )
        )
    return sorted(ranks, key=_rank_order)


def _rank_order(rank: DefinitionRank) -> tuple[bool, float, str]:
    advantage = rank.contest.advantage
    return (advantage is None, -(advantage or 0.0), rank.definition)
