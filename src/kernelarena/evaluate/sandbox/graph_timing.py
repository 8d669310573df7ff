"""CUDA graph timing: a graph of many calls over rotated input sets, each replay timed with events
(``time_cuda_graph``), the process's graph state settled first; and the cheap probe of a call's GPU
time (``probe_cuda_graph``, ``prefers_graph``) that decides between graphs and per-call events.

Graphs time calls too short for per-call events: launch gaps vanish, and a spin queued before each
replay keeps the host's launch of the graph out of the span. The L2 is not flushed inside a graph,
so callers rotate inputs over as many sets as fill it twice (``sets_filling_l2``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator
from typing import Any

import torch

from kernelarena.evaluate.sandbox.timing import (
    EVENT_LEAD_US,
    Call,
    Timing,
    lead_spin_cycles,
    reset_persisting_l2,
    summarize,
    time_cuda,
)
from kernelarena.runtime.capture import collector_paused

log = logging.getLogger("kernelarena.evaluate")

# torch.cuda.Event, Stream and CUDAGraph carry no annotations.
# mypy: disable-error-code="no-untyped-call"


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
    compiled peer's 128x4096 rmsnorm 14-15% faster with their results dropped."""
    results: list[Any] = [None] * sets

    def held(i: int) -> Any:
        result = fn(i)
        results[i % sets] = result
        return result

    return held, results


_SETTLED_DEVICES: set[int] = set()


def settle_graph_state(device: torch.device) -> None:
    """Put the process, before it times its first CUDA graph, in the state its graphs replay in
    once work has run on a side stream: that state, once entered, lasts for the process's life.

    A process's graphs replay with ~0.1 us between kernels until work that allocates runs on a
    stream other than the default one (a side stream, or the capture of a call that allocates
    intermediates, as torch eager code does), and with ~0.45 us from then on, for every graph of
    the process (H200 2.31 against 2.66 us a call of 2.27 us kernels, H100 2.48 against 2.83;
    ``benchmarks/probes/probe_graph_state.py``). Left to chance, a benchmark process turned at
    its first eager peer's graph and a sandbox that timed one solution did not: every provider at
    128x4096 read 0.3-0.4 us apart between ``bench_norms.py`` and the engine's traces. Every
    timing process now enters the lasting state first, the one a program that uses more than one
    stream runs in."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index in _SETTLED_DEVICES:
        return
    # What ``probe_graph_state.py``'s side_stream_work step does, which turned every process it
    # ran in: 4 MB results, each its own allocation on the side stream (4 KB ones did not).
    operand = torch.ones(1 << 20, device=device)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(10):
            operand = operand + 1
    torch.cuda.synchronize(device)
    del operand
    _SETTLED_DEVICES.add(index)


def capture_graph(fn: Call, device: torch.device, *, calls: int, warmup: int = 3) -> Any:
    """Warm-up calls on the current stream, where the timed calls run, then ``calls`` calls
    captured in one CUDA graph, replayed once (the first replay uploads it). The process's graph
    state is settled first (``settle_graph_state``)."""
    settle_graph_state(device)
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with guarded_capture(device), torch.cuda.graph(graph):
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
    only. Without the spin the span also holds the host's launch of the graph (on an H200,
    a 60-call graph of 2.27 us rmsnorm kernels read 2.82 us a call without the spin
    and 2.32 with it, with the same kernels and gaps in the profiler: 30 us of launch a replay)."""
    samples = []
    stream = torch.cuda.current_stream(device)
    spin_cycles = lead_spin_cycles(device, lead_us)
    spent_ms = 0.0
    for replay in range(replays):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        reset_persisting_l2()
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
    settle_graph_state(device)
    for i in range(warmup):
        fn(i)
    graph = _captured(fn, device, calls)
    stream = torch.cuda.current_stream(device)
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


def _captured(fn: Call, device: torch.device, calls: int) -> Any:
    """``calls`` calls captured in one graph on a side stream, never replayed; raises when a call
    cannot be captured, with the current stream left where it was."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    side = torch.cuda.Stream(device)  # captures cannot run on the legacy default stream
    side.wait_stream(torch.cuda.current_stream(device))
    graph = torch.cuda.CUDAGraph()
    with guarded_capture(device), torch.cuda.stream(side):
        graph.capture_begin()
        try:
            for i in range(calls):
                fn(i)
        finally:
            graph.capture_end()  # ends the capture also when a call failed in it
    torch.cuda.current_stream(device).wait_stream(side)
    return graph


@contextlib.contextmanager
def guarded_capture(device: torch.device) -> Iterator[None]:
    """Around a capture on ``device``: Python's collector held off inside it
    (``collector_paused``), and after a failure the state it leaves cleared
    (``clear_failed_capture``) before the error goes on."""
    try:
        with collector_paused():
            yield
    except Exception:
        clear_failed_capture(device)
        raise


def clear_failed_capture(device: torch.device) -> None:
    """After a capture that failed: the device's random generator is left marked as capturing
    (the capture's end raised before it unmarked it), and every later draw on it raises "Offset
    increment outside graph capture encountered unexpectedly", in the sandbox as in any process.
    A capture that succeeds unmarks it: one of a single small kernel, never replayed."""
    try:
        torch.cuda.synchronize(device)
        scratch = torch.empty(1, device=device)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.device(device), torch.cuda.stream(side), collector_paused():
            graph.capture_begin()
            scratch.zero_()
            graph.capture_end()
        torch.cuda.current_stream(device).wait_stream(side)
        del graph
    except Exception as error:  # the original failure is what the caller reports
        log.warning("could not clear a failed capture's state on %s: %s", device, error)


def capture_fails(fn: Call, device: torch.device) -> bool:
    """Whether one call fails inside a CUDA graph capture (a host synchronization, an allocation
    outside the graph's pool), found without replaying it: the capture runs nothing on the GPU, so
    a long call costs only its host side. A capture that runs out of memory says nothing about
    the call and counts as not failed. A value-returning call's result from the capture lives in
    the graph's pool for as long as ``fn`` holds it: its caller gives that memory back."""
    settle_graph_state(device)
    try:
        _captured(fn, device, 1)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.synchronize(device)
        return False
    except Exception:
        torch.cuda.synchronize(device)
        return True
    return False


def prefers_graph(
    fn: Call, device: torch.device, *, warmup: int, graph_below_us: float, allow_graph: bool = True
) -> tuple[bool, bool]:
    """Whether to time with CUDA graphs, and whether a capture was tried and failed. The GPU time
    of a call decides the mode: under ``graph_below_us``, CUDA graphs (launch gaps would dominate
    per-call events), so the longer event run is spent only where it is used. A few calls timed
    with events give the GPU time when the GPU is the slower side; when the host takes as long to
    submit a call as the events measured (an autotuned Triton launcher: 70-110 us of Python for a
    2-35 us kernel), events measure the host, and a graph of two calls replayed gives the GPU
    time instead. Long GPU-bound calls (a copy of a GiB) are never replayed by the probe, only
    captured once, so that whether they can be captured is known (``capture_fails``). A call
    that cannot be captured is timed with events; so is every call without ``allow_graph`` (the
    judge's retry of a solution whose failed capture broke its process)."""
    if device.type != "cuda" or not allow_graph:
        return False, False
    with torch.no_grad():
        events = time_cuda(
            fn, device, warmup=warmup, max_iterations=5, min_iterations=5, budget_ms=0.0
        )
        if events.median_ms * 1e3 < graph_below_us:
            return True, False
        submitted = time.perf_counter()
        for i in range(3):
            fn(i)
        host_ms = (time.perf_counter() - submitted) * 1e3 / 3
        torch.cuda.synchronize(device)
        if host_ms < 0.5 * events.median_ms:  # the GPU is the slower side: events measured it
            return False, capture_fails(fn, device)
        try:
            probe = probe_cuda_graph(fn, device, warmup=warmup)
        except Exception:  # not capturable; a call that fails outright fails again in events
            torch.cuda.synchronize(device)
            return False, True
    return probe.median_ms * 1e3 < graph_below_us, False
