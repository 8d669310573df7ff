"""How many sets one request to a sandbox carries: the sets whose outputs one ``expect`` to the
reference computes, whose inputs one ``make_inputs`` shapes, and the seeds the judge draws at once,
each a run of at most ``REQUEST_SET_BYTES`` (a larger set alone). A timing's rotated sets come by
the dozen and each request costs a round trip (one a set cost the judge 27 a job on bench_scaling's
norms); the reference's sandbox holds every set's results until the judge has them, so a run of
large sets is never all held at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

REQUEST_SET_BYTES = 256 << 20

Item = TypeVar("Item")


def in_runs(
    items: Sequence[Item], size_of: Callable[[Item], int], limit: int = REQUEST_SET_BYTES
) -> list[list[Item]]:
    """``items`` in order, in runs of at most ``limit`` bytes by ``size_of`` (an item larger
    than that alone; items of no bytes join the run at hand)."""
    runs: list[list[Item]] = []
    total = 0
    for item in items:
        size = size_of(item)
        if not runs or total + size > limit:
            runs.append([])
            total = 0
        runs[-1].append(item)
        total += size
    return runs
