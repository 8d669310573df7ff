"""The judge's clocks: its own figures for a solution's timing, from outside the sandbox.

An eager loop over the timed sets and, where the sandbox timed a CUDA graph, replays of that graph,
each timed by the judge around the sandbox's device synchronization (``judge_clock``); the check of
the reported samples against them, with a longer second look before a rejection
(``agreed_clock``); the eager clock once more for the figure apply ranks by
(``eager_second_look``); and the host's submit time per call (``host_submit_ms``).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import torch

from kernelarena.evaluate.judge.crosscheck import (
    EVENT_MODES,
    JudgeClock,
    TimingRejected,
    check_reported,
)
from kernelarena.evaluate.judge.pass_check import after_pass, before_pass
from kernelarena.evaluate.judge.shared_sets import SetMaker, SharedSet
from kernelarena.evaluate.judge.stage_clock import staged
from kernelarena.evaluate.sandbox.confine import descendants, stat_fields
from kernelarena.evaluate.sandbox.timing import Timing, summarize

# The judge's replays of a graph run at least this long, so one synchronization is noise.
REPLAY_SPAN_MS = 2.0
# At most this many rounds over the timed sets in the judge's eager loop (a call of a microsecond
# would otherwise loop many thousands of times to last REPLAY_SPAN_MS).
EAGER_ROUNDS = 200
# At least this many calls in an eager batch, unless it lasts EAGER_LONG_BATCH_MS: at two calls of a
# millisecond (attention prefill), the first launch and the last synchronization added 80-210 us a
# call on an H200, more than the solutions differ by.
EAGER_MIN_CALLS = 16
EAGER_LONG_BATCH_MS = 25.0
# The judge's clocks keep the fastest of this many batches (of each length, for ``_per_call``).
CLOCK_BATCHES = 3
DIFFERENCE_BATCHES = 2
# Pairs of batches more, where the longer was not the slower (``_per_call``).
DIFFERENCE_RETRIES = 3
# Calls in a burst whose host time is the submit time: few enough that the launch queue never
# fills (past ~1000 pending kernels a launch waits for the GPU, and the host time becomes GPU time),
# and fewer where that many would take longer than SUBMIT_SPAN_MS.
SUBMIT_BURST = 32
SUBMIT_SPAN_MS = 25.0
# The eager clock is taken again where it reads over this many times both the host's submit time
# and the GPU time (``eager_inflated``).
SECOND_LOOK_ABOVE = 1.3
# A report the judge's clock contradicts is measured again over this many times the span.
SECOND_LOOK_SPAN = 10.0
# The CPU-time clock of a busy machine counts at least this many clock ticks (10 ms each at the
# usual 100 Hz: 5%, where the claims it must refute are off by 20x or more), for at most this long
# (well inside a job's time limit).
CPU_CLOCK_TICKS = 20
CPU_CLOCK_WALL_S = 6.0
# A context in which nothing else of kernelarena's runs (``Sandboxes.spares_stopped``).
Quiet = Callable[[], AbstractContextManager[None]]


@staged("judge_clocks")
def judge_clock(
    sets: SetMaker, rotated: list[SharedSet], reported: Timing, span: float = 1.0
) -> JudgeClock:
    """The judge's figures for a reported timing: an eager pass over the rotated sets, and
    replays of the sandbox's graph where it timed one; each over ``span`` times the usual time."""
    eager_ms = eager_clock(sets, rotated, span)
    graph = reported.mode == "cuda_graph"
    graph_ms = replay_clock(sets, rotated, reported.median_ms, span) if graph else None
    return JudgeClock(eager_call_ms=eager_ms, graph_call_ms=graph_ms)


@staged("judge_clocks")
def agreed_clock(
    sets: SetMaker,
    rotated: list[SharedSet],
    reported: Timing,
    clock: JudgeClock,
    floor_ms: float,
    quiet: Quiet = contextlib.nullcontext,
) -> tuple[JudgeClock, str, Timing]:
    """The judge's clock the reported timing agrees with (else ``TimingRejected``), a line for
    the trace when that took another look, and the timing to record. A disagreement is measured
    again inside ``quiet()`` (nothing else of kernelarena's runs there: the spare sandboxes
    stopped) over ``SECOND_LOOK_SPAN`` times the span. On the CPU, where a busy machine stretches
    every wall clock, the last word is the sandbox's CPU time as the kernel counts it
    (``cpu_time_clock``), so that an honest solution is never rejected because other programs
    took the cores. On a GPU, a call timed with events (one that cannot be captured) may cost
    its caller far more than its GPU time: a host synchronization inside it, many small launches.
    Its eager figure then stays below the judge's, and nothing from outside tells an honest
    host-bound call from a forged timer; it is not rejected, and the judge's own figure, which
    holds all the work, the host's included, is recorded instead of the report."""
    try:
        check_reported(reported, clock, floor_ms)
        return clock, "", reported
    except TimingRejected as first:
        with quiet():
            clock = judge_clock(sets, rotated, reported, SECOND_LOOK_SPAN)
            try:
                check_reported(reported, clock, floor_ms)
                note = f"a second look agreed, over {SECOND_LOOK_SPAN:g}x the span, after: {first}"
                return clock, note, reported
            except TimingRejected as second:
                if reported.mode in EVENT_MODES and not second.below_physics:
                    judged = summarize([clock.eager_call_ms], reported.mode)
                    return clock, _judged_note(reported, clock), judged
                cpu = cpu_time_clock(sets, rotated)
                if cpu is None:
                    raise second from None
        check_reported(reported, cpu, floor_ms)
        return (
            cpu,
            (
                f"the machine was busy: the judge's wall clock read {clock.eager_call_ms * 1e3:.4g} "
                f"us a call, the sandbox's CPU time {cpu.eager_call_ms * 1e3:.4g} us, which agrees "
                f"with the report (first look: {first})"
            ),
            reported,
        )


def _judged_note(reported: Timing, clock: JudgeClock) -> str:
    return (
        f"the judge's figure recorded: the solution's process reported "
        f"{reported.median_ms * 1e3:.4g} us a call ({reported.mode}), under half of the "
        f"{clock.eager_call_ms * 1e3:.4g} us the judge's clock measured over eager passes with "
        "the device synchronized, twice: a call that cannot be captured and costs its caller "
        "more than its GPU time (a host synchronization inside it, many small launches), or a "
        "timer that was not what it claims; either way the judge's figure holds all its work"
    )


def cpu_time_clock(sets: SetMaker, rotated: list[SharedSet]) -> JudgeClock | None:
    """On the CPU: the sandbox's CPU time a call, as the kernel accounts it (its threads, ended
    ones included, and the processes it started), over checked passes grown until that time
    reaches ``CPU_CLOCK_TICKS`` clock ticks (or ``CPU_CLOCK_WALL_S`` have passed). Unlike a wall
    clock it does not count the time other programs held the cores; like the judge's other
    clocks it is not the solution's claim. None off the CPU, or where too little was counted."""
    if sets.device.type != "cpu":
        return None
    ids = [s.id for s in rotated]
    calls, total = len(ids), 0
    first = _cpu_ticks(sets.sandbox.pid)
    deadline = time.monotonic() + CPU_CLOCK_WALL_S
    used = 0
    while used < CPU_CLOCK_TICKS and time.monotonic() < deadline:
        _checked_request(sets, rotated, ("eager", ids, calls), "the calls timed by CPU time")
        total += calls
        used = _cpu_ticks(sets.sandbox.pid) - first
        calls *= 2
    if used < CPU_CLOCK_TICKS // 4:
        return None
    return JudgeClock(eager_call_ms=used * 1e3 / os.sysconf("SC_CLK_TCK") / total)


def _cpu_ticks(root: int) -> int:
    """User and system clock ticks of ``root`` and its live descendants (/proc/PID/stat fields
    14 and 15: a process's ended threads included)."""
    ticks = 0
    for pid in [root, *descendants(root)]:
        fields = stat_fields(pid)
        if fields is not None and len(fields) > 12:
            ticks += int(fields[11]) + int(fields[12])
    return ticks


def eager_clock(sets: SetMaker, timed: list[SharedSet], span: float = 1.0) -> float:
    """The judge's clock around eager loops over the timed sets: ms per call, host launch
    included. The loop's length ``count`` is found by growing it until a batch lasts
    ``REPLAY_SPAN_MS`` (within bounds) on the judge's clock (as ``timeit`` sizes its loops), not
    from the reported time: a launch often costs far more than the GPU time, and a false report
    must not size the loop either. The figure is the difference between batches of ``2 * count``
    and ``count`` calls over ``count`` (``_per_call``)."""
    ids = [s.id for s in timed]
    what = "the judge's eager calls"
    most = int(len(ids) * EAGER_ROUNDS * span)
    count = len(ids)
    while count < most:
        wall = _checked_wall(sets, timed, ("eager", ids, count), what)
        enough = count >= EAGER_MIN_CALLS or wall >= EAGER_LONG_BATCH_MS * span
        if wall >= REPLAY_SPAN_MS * span and enough:
            break
        wanted = count * REPLAY_SPAN_MS * span / max(wall, 1e-3)
        count = min(most, max(2 * count, -(-int(wanted) // len(ids)) * len(ids)))
    return _per_call(sets, timed, lambda n: ("eager", ids, n), count, what) / count


def eager_inflated(clock: JudgeClock, submit_ms: float | None, reported: Timing) -> bool:
    """Whether the eager clock reads over ``SECOND_LOOK_ABOVE`` times both the host's submit time
    and the reported GPU time (or no submit time came): then ``eager_second_look`` takes it again.
    A stall of the host inflates it far beyond both (1.8-3.1x on an H100); an honest figure sits
    at 1.0-1.1x the larger. Claims that avoid the second look (a submit time over-reported) only
    leave the judge's figure as high as it was."""
    if submit_ms is None:
        return True
    return clock.eager_call_ms > SECOND_LOOK_ABOVE * max(submit_ms, reported.median_ms)


@staged("judge_clocks")
def eager_second_look(sets: SetMaker, rotated: list[SharedSet], clock: JudgeClock) -> JudgeClock:
    """``clock`` with the eager clock taken once more, the lesser kept, where it looks inflated
    (``eager_inflated``). Its batches run within milliseconds of each other, and one stall of the
    host can cover them all (on an H100, 4 of 45 traces with eager clocks of 1.8-3.1x both their
    host submit time and their GPU time, the other workloads of the same solutions at 1.0-1.1x;
    taken twice, 1 of 96 and 0 of 96). For the figure apply ranks by, after the checks, which use
    the first look."""
    return replace(clock, eager_call_ms=min(clock.eager_call_ms, eager_clock(sets, rotated)))


@staged("judge_clocks")
def host_submit_ms(sets: SetMaker, timed: list[SharedSet], eager_call_ms: float) -> float | None:
    """Per call, the host time of a short burst of eager calls before the device is synchronized
    (the least of ``CLOCK_BATCHES`` bursts of ``SUBMIT_BURST``, or as many as take
    ``SUBMIT_SPAN_MS``, and every set at least once): what the call costs the host
    whether or not the GPU keeps up, so that apply can tell how close to host-bound a choice is
    on a slower host. The sandbox's own clock, so the claim is capped by the judge's eager time,
    which a submit time cannot exceed: a solution that under-reports it ranks as it would
    without one (``table.py``, rule 3). None where the sandbox reports nothing usable."""
    ids = [s.id for s in timed]
    fit = math.ceil(SUBMIT_SPAN_MS / max(eager_call_ms, 1e-6))
    calls = max(len(ids), min(SUBMIT_BURST, fit))
    figures = []
    for _ in range(CLOCK_BATCHES):
        what = "the calls whose submit time was measured"
        reply = _checked_request(sets, timed, ("eager", ids, calls), what)
        host = reply.get("host_ms")
        if not isinstance(host, int | float) or not math.isfinite(host) or host < 0:
            return None
        figures.append(host / calls)
    return round(min(min(figures), eager_call_ms), 6)


def _checked_request(
    sets: SetMaker,
    timed: list[SharedSet],
    request: tuple[Any, ...],
    what: str,
    took: list[float] | None = None,
) -> dict[str, Any]:
    """One request as a checked pass (``pass_check``): outputs poisoned before it, compared after
    it; its reply. With ``took``, its wall time in ms is appended there, neither check inside it
    (the device synchronized before it starts)."""
    before_pass(sets, timed)
    if took is not None and sets.device.type == "cuda":
        torch.cuda.synchronize(sets.device)
    started = time.perf_counter()
    reply = sets.sandbox.request(*request)
    if took is not None:
        took.append((time.perf_counter() - started) * 1e3)
    after_pass(sets, timed, reply, what)
    return reply


def _checked_wall(
    sets: SetMaker, timed: list[SharedSet], request: tuple[Any, ...], what: str
) -> float:
    """The wall time of one checked request, in ms (``_checked_request``)."""
    took: list[float] = []
    _checked_request(sets, timed, request, what, took)
    return took[0]


def _per_call(
    sets: SetMaker,
    timed: list[SharedSet],
    request: Callable[[int], tuple[Any, ...]],
    count: int,
    what: str,
) -> float:
    """Ms for ``count`` units of work (calls, replays): the least wall of ``DIFFERENCE_BATCHES``
    requests of ``2 * count`` less the least of as many of ``count``, taken in turn. What every
    request costs besides its units cancels: the round trip, the first launch and the last
    synchronization, the delivery of a value-returning solution's results, and the sandbox's
    GPU warming its address translation again after the judge's poison ran in another context
    (on an H100: 9-15% of a 300 us call's figure, and more than a whole empty
    graph's, when a batch's wall time less a round trip was the figure)."""
    short, long = float("inf"), float("inf")
    for batch in range(DIFFERENCE_BATCHES + DIFFERENCE_RETRIES):
        short = min(short, _checked_wall(sets, timed, request(count), what))
        long = min(long, _checked_wall(sets, timed, request(2 * count), what))
        if batch + 1 >= DIFFERENCE_BATCHES and long > short:
            return long - short
    # Noise larger than ``count`` units every time (a busy 2-core machine): the longer batch's
    # share, an upper bound, rather than a 0 that would rank the solution first.
    return long / 2


def replay_clock(
    sets: SetMaker, rotated: list[SharedSet], reported_ms: float, span: float = 1.0
) -> float | None:
    """The judge's clock around replays of the sandbox's graph: ms per call."""
    first = _checked_request(sets, rotated, ("replay", 1), "a replay of the timed CUDA graph")
    calls = first.get("calls")
    if not isinstance(calls, int) or calls <= 0:
        return None
    per_replay = max(reported_ms * calls, 1e-4)
    count = max(1, min(int(50 * span), int(REPLAY_SPAN_MS * span / per_replay) + 1))
    what = "the judge's replays of the timed CUDA graph"
    return _per_call(sets, rotated, lambda n: ("replay", n), count, what) / (count * calls)
