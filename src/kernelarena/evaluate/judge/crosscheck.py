"""Whether a time a sandbox reports can be true: checked against the judge's clock and physics.

The sandbox's own timers (CUDA events, graph replays, the CPU clock) measure best, and they run where
the solution can patch them. So every reported median must agree with what the judge measured from
outside around a synchronized batch of calls (an eager pass over every timed input set, and for CUDA
graph timing, replays of the same graph), and must not beat moving the workload's bytes at the
measured copy bandwidth or its FLOPs at the measured matrix rate. A claim that fails either is
rejected: the trace becomes RUNTIME_ERROR with a log line that starts "timing rejected:".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kernelarena.evaluate.sandbox.timing import Timing, summarize

# How far below the judge's figure a reported median may fall. The judge's figure includes one
# synchronization per batch and, for the eager pass, the host's launches; honest reports sit at
# 0.8-1.0x of it (graph) and 0.5-1.0x (events, whose L2 flush the eager pass lacks, makes them
# slower, not faster). The attacks this catches are off by orders of magnitude.
AGREEMENT = 0.5
# The CPU clock's median of single calls shrugs off preemption; the judge's loop does not, and on a
# loaded machine (two cores, six busy processes in CI) honest reports fell to 0.2x of it. The CPU
# device is for checking, not for ranking, and the attacks it must catch are off by 1000x or more.
CPU_AGREEMENT = 0.05
# A GPU claim this close to the judge's figure in absolute terms is accepted at any ratio: below a
# quarter of a microsecond per call a call launches no kernel worth the name (an empty batch's
# graph replays in 0.02 us a call, which the judge's clock, one synchronization per batch of
# replays, read as 0.04 us on an H100), and nothing there can be gained by a forged figure.
GPU_SLACK_MS = 0.25e-3
# How far below the physical floor (bytes at copy bandwidth, FLOPs at matmul rate) a median may fall:
# small calls can run from the L2 at more than DRAM bandwidth, but those are launch-bound anyway.
PHYSICS_MARGIN = 0.5
# Host cost a launch may add to an eager call over its graph replay before the trace says host-bound.
LAUNCH_ALLOWANCE_MS = 0.02
MODES = {"cuda_graph", "cuda_events_l2_flush", "cuda_events", "cpu_clock"}


class TimingRejected(Exception):
    """A reported timing that cannot be true; ``below_physics`` when it beats the device's
    ceilings (proof of a clock that does not measure the work), else it disagrees with the
    judge's clock."""

    def __init__(self, message: str, below_physics: bool = False) -> None:
        super().__init__(message)
        self.below_physics = below_physics


EVENT_MODES = frozenset({"cuda_events_l2_flush", "cuda_events"})


def reported_timing(reply: dict[str, Any]) -> Timing:
    """The sandbox's samples as a Timing, its statistics computed here; malformed claims rejected."""
    mode = reply.get("mode")
    samples = reply.get("samples_ms")
    if mode not in MODES:
        raise TimingRejected(f"timing rejected: unknown timing mode {str(mode)[:40]!r}")
    if not isinstance(samples, list) or not 0 < len(samples) <= 100_000:
        raise TimingRejected("timing rejected: no samples, or too many")
    if not all(isinstance(s, int | float) and math.isfinite(s) and s > 0 for s in samples):
        raise TimingRejected(
            "timing rejected: a sample is zero, negative or not finite: a clock that did not advance"
        )
    return summarize([float(s) for s in samples], str(mode))


@dataclass(frozen=True)
class JudgeClock:
    eager_call_ms: float  # the judge's wall clock over one eager pass, per call
    graph_call_ms: float | None = None  # over replays of the sandbox's graph, per call


def physics_floor_ms(
    bytes_moved: float | None, flops: float | None, ceilings: dict[str, float]
) -> float:
    """The least time the workload can take on this device (0 without ceilings or costs)."""
    floor = 0.0
    if bytes_moved and ceilings.get("copy_gbps"):
        floor = max(floor, bytes_moved / (ceilings["copy_gbps"] * 1e9) * 1e3)
    if flops and ceilings.get("matmul_tflops"):
        floor = max(floor, flops / (ceilings["matmul_tflops"] * 1e12) * 1e3)
    return floor


def check_reported(reported: Timing, clock: JudgeClock, floor_ms: float) -> None:
    claimed = reported.median_ms
    # A CPU's ceilings are measured at the worker's start, on a machine that may be busy then and
    # idle later (a copy rate of 2 GB/s read beside four busy processes): no floor for the CPU.
    cpu = reported.mode == "cpu_clock"
    if floor_ms > 0 and not cpu and claimed < PHYSICS_MARGIN * floor_ms:
        raise TimingRejected(
            f"timing rejected: the reported {_us(claimed)} per call is below what moving this "
            f"workload's bytes or FLOPs takes on this device ({_us(floor_ms)} at the measured "
            "ceilings): a clock that does not measure the work",
            below_physics=True,
        )
    if reported.mode == "cuda_graph" and clock.graph_call_ms is not None:
        judged, how = clock.graph_call_ms, "replays of the same CUDA graph"
    else:
        judged, how = clock.eager_call_ms, "an eager pass over the timed inputs"
    agreement = CPU_AGREEMENT if cpu else AGREEMENT
    if claimed < agreement * judged and (cpu or judged - claimed > GPU_SLACK_MS):
        raise TimingRejected(
            f"timing rejected: the solution's process reported {_us(claimed)} per call "
            f"({reported.mode}), but the judge's clock measured {_us(judged)} per call over {how}, "
            "with the device synchronized: its timer or its work was not what it claims "
            "(a patched timer, or work left running on another stream)"
        )


def host_bound_note(reported: Timing, clock: JudgeClock) -> str:
    """A line for the trace when an eager call costs the caller far more than its GPU time."""
    if reported.mode != "cuda_graph":
        return ""
    gpu = reported.median_ms
    if clock.eager_call_ms <= 2 * gpu + LAUNCH_ALLOWANCE_MS:
        return ""
    return (
        f"host-bound: an eager call takes {_us(clock.eager_call_ms)} of wall time, its GPU work "
        f"{_us(gpu)} (CUDA graph replay); callers outside a CUDA graph pay the former"
    )


def _us(ms: float) -> str:
    return f"{ms * 1e3:.4g} us"
