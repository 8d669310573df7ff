"""Timing with every sample kept: CUDA events (L2 flushed between calls), CUDA graphs, CPU clock;
and a cheap probe of a call's GPU time (``probe_cuda_graph``) that decides between the first two.

Each timer calls ``fn(i)`` for iteration ``i`` so that callers can rotate input sets; warm-up calls
are made first and never counted. ``summarize`` gives the median and the 20th/80th percentiles.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

# torch.cuda.Event and Stream carry no annotations.
# mypy: disable-error-code="no-untyped-call"

Call = Callable[[int], Any]


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    count: int
    mode: str
    samples_ms: list[float] = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _percentile(sorted_samples: list[float], q: float) -> float:
    if len(sorted_samples) == 1:
        return sorted_samples[0]
    position = q * (len(sorted_samples) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_samples) - 1)
    return sorted_samples[low] + (sorted_samples[high] - sorted_samples[low]) * (position - low)


def summarize(samples_ms: list[float], mode: str) -> Timing:
    if not samples_ms:
        raise ValueError("no timing samples")
    ordered = sorted(samples_ms)
    return Timing(
        median_ms=statistics.median(ordered),
        p20_ms=_percentile(ordered, 0.2),
        p80_ms=_percentile(ordered, 0.8),
        count=len(ordered),
        mode=mode,
        samples_ms=list(samples_ms),
    )


class L2Flusher:
    """Writes a buffer twice the size of the L2 so the next call starts from device memory."""

    def __init__(self, device: torch.device) -> None:
        props = torch.cuda.get_device_properties(device)
        size = max(int(getattr(props, "L2_cache_size", 0)) * 2, 64 << 20)
        self.buffer = torch.empty(size // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


_flushers: dict[torch.device, L2Flusher] = {}


def l2_flusher(device: torch.device) -> L2Flusher:
    """One flusher per device for the life of the process: a fresh 120 MB buffer for every timed
    call would go back to cudaMalloc each time a graph capture has emptied the allocator's cache."""
    if device.index is None:
        device = torch.device(device.type, torch.cuda.current_device())
    if device not in _flushers:
        _flushers[device] = L2Flusher(device)
    return _flushers[device]


def spin_cycles_per_us(device: torch.device) -> float:
    """SM clock cycles a microsecond at the device's top clock (``torch.cuda._sleep`` counts
    cycles): a spin asked for N us lasts at least N us at any lower clock."""
    properties = torch.cuda.get_device_properties(device)
    khz = getattr(properties, "clock_rate", 0) or 2_000_000  # not in every torch: 2 GHz
    return khz / 1e3


# A spin queued before each event-timed call, longer than a host launch (torch.compile's wrapper
# took 50-100 us on an H100 host, FlashInfer's prefill plan and launches 126-239 us): the pair then
# times the GPU work, not the host's, and the GPU runs every sample from the same busy state instead
# of from whatever idle gap the host's launch left. The engine and the benchmarks both use it, so a
# trace and a benchmark's figure for the same solution compare. What a call costs the host is
# measured apart (the judge's eager clock, ``host_submit_ms``).
EVENT_LEAD_US = 150.0


def time_cuda(
    fn: Call,
    device: torch.device,
    *,
    warmup: int = 3,
    max_iterations: int = 100,
    min_iterations: int = 5,
    budget_ms: float = 300.0,
    flush_l2: bool = True,
    lead_us: float = 0.0,
) -> Timing:
    """One event pair around each call; the L2 flush happens outside the pair. With ``lead_us``,
    a spin kernel of about that long is queued after the flush and before the start event, so
    that the GPU is still busy while the host prepares the call: the pair then times the call's
    GPU work, not a host launch longer than its kernels (a torch.compile wrapper's 50-100 us)."""
    flusher = l2_flusher(device) if flush_l2 else None
    spin_cycles = int(lead_us * spin_cycles_per_us(device)) if lead_us > 0 else 0
    stream = torch.cuda.current_stream(device)
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize(device)
    samples: list[float] = []
    started = time.perf_counter()
    batch = 10
    iteration = 0
    while iteration < max_iterations:
        pairs = []
        for _ in range(min(batch, max_iterations - iteration)):
            if flusher is not None:
                flusher()
            if spin_cycles:
                torch.cuda._sleep(spin_cycles)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            fn(warmup + iteration)
            end.record(stream)
            pairs.append((start, end))
            iteration += 1
        torch.cuda.synchronize(device)
        samples += [s.elapsed_time(e) for s, e in pairs]
        spent_ms = (time.perf_counter() - started) * 1e3
        if iteration >= min_iterations and spent_ms > budget_ms:
            break
    return summarize(samples, "cuda_events_l2_flush" if flush_l2 else "cuda_events")


def time_cuda_graph(
    fn: Call,
    device: torch.device,
    *,
    calls_per_graph: int = 20,
    replays: int = 30,
    warmup: int = 3,
    budget_ms: float | None = None,
    min_replays: int = 5,
) -> Timing:
    """For kernels too short for per-call events: a graph of ``calls_per_graph`` calls, each
    replay timed, each sample the replay time over the calls in it. Launch gaps vanish; the L2 is
    not flushed inside a graph, so callers rotate inputs through ``fn(i)`` where that matters.
    With ``budget_ms``, replays stop once they have taken that long (after ``min_replays``)."""
    graph = capture_graph(fn, device, calls=calls_per_graph, warmup=warmup)
    timing = time_replays(
        graph,
        device,
        calls_per_graph,
        replays=replays,
        budget_ms=budget_ms,
        min_replays=min_replays,
    )
    del graph
    return timing


def graph_calls(sets: int) -> int:
    """Calls in the graph a timing captures over ``sets`` input sets: every set at least once, and
    at least 20 calls (the judge computes the same to know which set a graph's last call used)."""
    return max(20, sets)


MAX_ROTATED_SETS = 64


def sets_filling_l2(set_bytes: float, device: torch.device) -> int:
    """How many input sets of ``set_bytes`` (inputs and outputs) fill twice the L2, so that a graph
    reading each once finds none of them there: at least 2, at most ``MAX_ROTATED_SETS``; 2 off
    the GPU. The engine's rotation, and the benchmarks', so that a trace and a benchmark's figure
    for the same solution compare."""
    if device.type != "cuda":
        return 2
    l2_bytes = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20))
    return max(2, min(MAX_ROTATED_SETS, math.ceil(2 * l2_bytes / max(set_bytes, 1))))


def held_per_set(fn: Call, sets: int) -> tuple[Call, list[Any]]:
    """``fn(i)`` (a call on set ``i % sets``), with each result held until the next call on the same
    set replaces it, and the list that holds them (one slot per set). A value-returning solution's
    outputs then take fresh memory per set, as a destination-passing solution writes the set's own
    outputs: a result dropped at once hands its memory to the next call, whose writes then stay in
    the L2 (a 128x4096 rmsnorm's 1 MB, a 4096x2048 silu_and_mul's 16 MB) where the
    destination-passing solution's go out to memory. Engine traces on an H100 read Liger's and the
    compiled peer's 128x4096 rmsnorm 14-15% faster with their results dropped (2026-11-25)."""
    results: list[Any] = [None] * sets

    def held(i: int) -> Any:
        result = fn(i)
        results[i % sets] = result
        return result

    return held, results


def capture_graph(fn: Call, device: torch.device, *, calls: int, warmup: int = 3) -> Any:
    """Warm-up calls on a side stream, then ``calls`` calls captured in one CUDA graph, replayed
    once (the first replay uploads it)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for i in range(warmup):
            fn(i)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i)
    graph.replay()
    torch.cuda.synchronize(device)
    return graph


def time_replays(
    graph: Any,
    device: torch.device,
    calls: int,
    *,
    replays: int = 30,
    budget_ms: float | None = None,
    min_replays: int = 5,
    lead_us: float = EVENT_LEAD_US,
) -> Timing:
    """Each replay between two events, ``lead_us`` of spin queued before the start event: the
    graph's launch then happens while the GPU is busy, and the span holds the graph's GPU work
    only. Without the spin the span also holds the host's launch of the graph (an H200,
    2026-11-26: a 60-call graph of 2.27 us rmsnorm kernels read 2.82 us a call without the spin
    and 2.32 with it, with the same kernels and gaps in the profiler: 30 us of launch a replay)."""
    samples = []
    stream = torch.cuda.current_stream(device)
    spin_cycles = int(lead_us * spin_cycles_per_us(device)) if lead_us > 0 else 0
    spent_ms = 0.0
    for replay in range(replays):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        if spin_cycles:
            torch.cuda._sleep(spin_cycles)
        start.record(stream)
        graph.replay()
        end.record(stream)
        end.synchronize()
        replay_ms = start.elapsed_time(end)
        samples.append(replay_ms / calls)
        spent_ms += replay_ms
        if budget_ms is not None and replay + 1 >= min_replays and spent_ms >= budget_ms:
            break
    return summarize(samples, "cuda_graph")


def probe_cuda_graph(
    fn: Call, device: torch.device, *, calls: int = 2, replays: int = 3, warmup: int = 3
) -> Timing:
    """The GPU time of a call without its host cost, cheaply: ``calls`` calls captured in one graph,
    each of ``replays`` replays timed with events, each sample the replay time over the calls. For
    choosing how to time, not for reporting: the data stay in L2 between replays. Raises when the
    call cannot be captured. Captures as ``torch.cuda.graph`` does (the allocator's cache emptied
    first, so the memory of earlier graphs is returned), except that the current stream is restored
    also when the capture fails: ``torch.cuda.graph`` leaves its capture stream current when
    ``capture_end`` raises, and later events would be recorded there."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        for i in range(warmup):
            fn(i)
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        graph.capture_begin()
        try:
            for i in range(calls):
                fn(i)
        finally:
            graph.capture_end()  # ends the capture also when a call failed in it
    stream = torch.cuda.current_stream(device)
    stream.wait_stream(side)
    pairs = []
    for _ in range(replays):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        graph.replay()
        end.record(stream)
        pairs.append((start, end))
    torch.cuda.synchronize(device)
    samples = [s.elapsed_time(e) / calls for s, e in pairs]
    del graph
    return summarize(samples, "cuda_graph_probe")


def time_cpu(
    fn: Call,
    *,
    warmup: int = 2,
    max_iterations: int = 50,
    min_iterations: int = 3,
    budget_ms: float = 200.0,
) -> Timing:
    for i in range(warmup):
        fn(i)
    samples: list[float] = []
    started = time.perf_counter()
    for iteration in range(max_iterations):
        begin = time.perf_counter_ns()
        fn(warmup + iteration)
        samples.append((time.perf_counter_ns() - begin) / 1e6)
        if iteration + 1 >= min_iterations and (time.perf_counter() - started) * 1e3 > budget_ms:
            break
    return summarize(samples, "cpu_clock")


def prefers_graph(fn: Call, device: torch.device, *, warmup: int, graph_below_us: float) -> bool:
    """The GPU time of a call decides the mode: under ``graph_below_us``, CUDA graphs (launch
    gaps would dominate per-call events), so the longer event run is spent only where it is
    used. A few calls timed with events give the GPU time when the GPU is the slower side;
    when the host takes as long to submit a call as the events measured (an autotuned Triton
    launcher: 70-110 us of Python for a 2-35 us kernel), events measure the host, and a graph
    of two calls replayed gives the GPU time instead. Long GPU-bound calls (a copy of a GiB)
    are never captured by the probe. A call that cannot be captured is timed with events."""
    if device.type != "cuda":
        return False
    with torch.no_grad():
        events = time_cuda(
            fn, device, warmup=warmup, max_iterations=5, min_iterations=5, budget_ms=0.0
        )
        if events.median_ms * 1e3 < graph_below_us:
            return True
        submitted = time.perf_counter()
        for i in range(3):
            fn(i)
        host_ms = (time.perf_counter() - submitted) * 1e3 / 3
        torch.cuda.synchronize(device)
        if host_ms < 0.5 * events.median_ms:
            return False  # the GPU is the slower side: the events measured it
        try:
            probe = probe_cuda_graph(fn, device, warmup=warmup)
        except Exception:  # not capturable; a call that fails outright fails again in events
            torch.cuda.synchronize(device)
            return False
    return probe.median_ms * 1e3 < graph_below_us


def time_events_or_clock(
    fn: Call,
    device: torch.device,
    *,
    warmup: int,
    max_iterations: int,
    min_iterations: int,
    budget_ms: float,
) -> Timing:
    """Per-call CUDA events (L2 flushed, ``EVENT_LEAD_US`` of spin before each start event) on a
    GPU; the CPU clock (at least 3 calls) elsewhere."""
    if device.type != "cuda":
        return time_cpu(
            fn,
            warmup=warmup,
            max_iterations=max_iterations,
            min_iterations=min(3, min_iterations),
            budget_ms=budget_ms,
        )
    return time_cuda(
        fn,
        device,
        warmup=warmup,
        max_iterations=max_iterations,
        min_iterations=min_iterations,
        budget_ms=budget_ms,
        lead_us=EVENT_LEAD_US,
    )


def device_healthy(device: torch.device) -> bool:
    """Whether the CUDA context still runs work (an illegal address leaves it unusable)."""
    try:
        torch.cuda.synchronize(device)
        return float(torch.ones(1, device=device).add_(1).item()) == 2.0
    except Exception:
        return False
