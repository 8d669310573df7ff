"""Timing with every sample kept: CUDA events (L2 flushed between calls) and the CPU clock. CUDA
graph timing, and the probe that decides between graphs and events, are in ``graph_timing``.

Each timer calls ``fn(i)`` for iteration ``i`` so that callers can rotate input sets; warm-up calls
are made first and never counted. ``summarize`` gives the median and the 20th/80th percentiles.
"""

from __future__ import annotations

import ctypes
import functools
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


_CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06


@functools.cache
def _cuda_driver() -> Any:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def reset_persisting_l2() -> None:
    """No L2 set aside for persisting accesses, and none of its lines persisting, in the current
    context: L2 lines a solution marks persisting (an access policy window on its stream or
    kernels) survive the flush between timed calls, and its next call would read them from the
    L2 (one harness read 3530 GB/s on an 864 GB/s card). Called by the timing loops before each
    timed call or replay, not by the solution."""
    driver = _cuda_driver()
    if driver is None:
        return
    set_aside = ctypes.c_size_t(0)
    # Without a set-aside no line can persist: then one query is all this costs.
    if driver.cuCtxGetLimit(ctypes.byref(set_aside), _CU_LIMIT_PERSISTING_L2_CACHE_SIZE) == 0 and (
        set_aside.value == 0
    ):
        return
    driver.cuCtxSetLimit(_CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(0))
    driver.cuCtxResetPersistingL2Cache()


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


def lead_spin_cycles(device: torch.device, lead_us: float) -> int:
    """Cycles of ``torch.cuda._sleep`` for a spin of about ``lead_us`` (0: no spin)."""
    return int(lead_us * spin_cycles_per_us(device)) if lead_us > 0 else 0


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
    spin_cycles = lead_spin_cycles(device, lead_us)
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
            reset_persisting_l2()
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
