"""Which CUDA host operations slow down when processes on the other GPUs of the host do the same.

A judge's job takes longer when more GPUs of the host work, and the stages that grow (draws, the
reference's outputs and timing) are not the solution's clocks. Each operation below runs in one
process per GPU, for 1, 2, ... GPUs at once (a barrier starts every phase together), and the
median time per operation is printed for each count. An operation whose time grows with the count
is one the driver or the host serializes across GPUs.

    PYTHONPATH=$PWD/src:$PWD python3 -m benchmarks.probes.probe_shared_driver [--counts 1,2,4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.multiprocessing as mp

MiB = 1 << 20


def _operations(device: torch.device) -> dict[str, tuple[int, Callable[[], float | None]]]:
    """name: (repetitions, one operation, ending in whatever wait it needs; one that returns a
    duration times itself)."""
    from kernelarena.evaluate.sandbox import arena_cuda

    small = torch.ones(256, device=device)
    pinned = torch.empty(64 * MiB, dtype=torch.uint8).pin_memory()
    pageable = torch.empty(64 * MiB, dtype=torch.uint8)
    on_device = torch.empty(64 * MiB, dtype=torch.uint8, device=device)

    def python_loop() -> None:
        total = 0
        for i in range(20000):
            total += i * i

    def launches() -> None:
        for _ in range(100):
            small.add_(1)
        torch.cuda.synchronize(device)

    def launches_only() -> float:
        torch.cuda.synchronize(device)  # not timed: the queue is empty when the launches start
        begin = time.perf_counter()
        for _ in range(100):
            small.add_(1)
        return time.perf_counter() - begin

    def sync_round_trip() -> None:
        small.add_(1)
        torch.cuda.synchronize(device)

    def item() -> None:
        small[0].item()

    def generator_draw() -> None:
        generator = torch.Generator(device=device).manual_seed(7)
        torch.randn(16 * MiB, device=device, generator=generator)
        torch.cuda.synchronize(device)

    def draw_cached() -> None:
        torch.randn(16 * MiB, device=device)
        torch.cuda.synchronize(device)

    def malloc_free() -> None:
        x = torch.empty(64 * MiB, dtype=torch.uint8, device=device)
        del x
        torch.cuda.empty_cache()

    def vmm_create() -> None:
        buffer, fd = arena_cuda.create(device, 256 * MiB)
        os.close(fd)
        del buffer
        arena_cuda.release_pending(device)

    def copy_pinned() -> None:
        on_device.copy_(pinned, non_blocking=True)
        torch.cuda.synchronize(device)

    def copy_pageable() -> None:
        on_device.copy_(pageable)

    def copy_back() -> None:
        pageable.copy_(on_device)

    def events() -> None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        small.add_(1)
        end.record()
        end.synchronize()
        start.elapsed_time(end)

    def graph_capture() -> None:
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            for _ in range(8):
                small.add_(1)
        graph.replay()
        torch.cuda.synchronize(device)

    return {
        "python loop (CPU only)": (200, python_loop),
        "100 launches + sync": (50, launches),
        "100 launches, no sync": (50, launches_only),
        "launch + sync": (500, sync_round_trip),
        ".item()": (500, item),
        "new generator + randn 64 MB": (100, generator_draw),
        "randn 64 MB (cached)": (100, draw_cached),
        "cudaMalloc+cudaFree 64 MB": (100, malloc_free),
        "cuMemCreate+map+unmap 256 MB": (50, vmm_create),
        "H2D 64 MB pinned": (50, copy_pinned),
        "H2D 64 MB pageable": (50, copy_pageable),
        "D2H 64 MB pageable": (50, copy_back),
        "event pair + elapsed": (500, events),
        "graph capture(8) + replay": (100, graph_capture),
    }


def _worker(index: int, count: int, barrier, results) -> None:  # type: ignore[no-untyped-def]
    device = torch.device(f"cuda:{index}")
    torch.cuda.set_device(device)
    operations = _operations(device)
    for name, (repetitions, operation) in operations.items():
        operation()  # warm
        torch.cuda.synchronize(device)
        barrier.wait()
        samples = []
        for _ in range(repetitions):
            begin = time.perf_counter()
            timed = operation()
            samples.append(time.perf_counter() - begin if timed is None else timed)
        results.put((count, index, name, statistics.median(samples) * 1e6))
        barrier.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    found = torch.cuda.device_count()
    parser.add_argument("--counts", default=",".join(str(c) for c in (1, 2, 4, 8) if c <= found))
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    context = mp.get_context("spawn")
    table: dict[str, dict[int, float]] = {}
    for count in (int(c) for c in args.counts.split(",")):
        barrier, results = context.Barrier(count), context.Queue()
        workers = [
            context.Process(target=_worker, args=(i, count, barrier, results)) for i in range(count)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        while not results.empty():
            _, _gpu, name, micros = results.get()
            # the slowest GPU's median: the one a run waits for
            table.setdefault(name, {})[count] = max(table.get(name, {}).get(count, 0.0), micros)
    counts = sorted({c for row in table.values() for c in row})
    print(f"{'operation (median us, slowest GPU)':36}" + "".join(f"{c:>10} GPU" for c in counts))
    for name, row in table.items():
        print(f"{name:36}" + "".join(f"{row.get(c, float('nan')):14.1f}" for c in counts))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": torch.cuda.get_device_name(0), "table": table}, handle, indent=1)


if __name__ == "__main__":
    main()
