"""Which of the host's CPUs share a physical core, and whether busy processes slow each other down.

A judge's host work (plain Python) ran 1.5x slower with four busy processes than with one on the
four-GPU hosts, whose guest kernel shows one thread a core. If the hypervisor's vCPUs are in fact
hardware-thread siblings, two processes the guest scheduler puts on a pair share one core. This
times a fixed pure-Python loop pinned to CPU 0 beside the same loop pinned to each other CPU (a
sibling shows as a large slowdown), then groups of busy loops placed unpinned, on consecutive CPUs,
on every other CPU and spread over the machine.

    python3 -m benchmarks.probes.probe_cpu_siblings [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Sequence
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path

LOOP = 600_000


def _spin(cpu: int | None, start: Event, results: Queue[tuple[int | None, float]]) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    start.wait()
    began = time.perf_counter()
    total = 0
    for i in range(LOOP):
        total += i * i
    results.put((cpu, time.perf_counter() - began))


def timed_group(cpus: Sequence[int | None]) -> list[float]:
    """Each loop's seconds, all started together, one process per entry (None: unpinned)."""
    context = mp.get_context("fork")
    start = context.Event()
    results: Queue[tuple[int | None, float]] = context.Queue()
    processes = [context.Process(target=_spin, args=(cpu, start, results)) for cpu in cpus]
    for process in processes:
        process.start()
    time.sleep(0.05)
    start.set()
    seconds = [results.get()[1] for _ in processes]
    for process in processes:
        process.join()
    return seconds


def topology() -> dict[str, object]:
    found: dict[str, object] = {"cpu_count": os.cpu_count()}
    siblings = set()
    for cpu in sorted(os.sched_getaffinity(0)):
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        if path.exists():
            siblings.add(path.read_text().strip())
    found["guest_thread_siblings"] = sorted(siblings)[:8]
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            found["model"] = line.split(":", 1)[1].strip()
            break
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    found: dict[str, object] = {"topology": topology()}
    print(json.dumps(found["topology"]))
    alone = statistics.median(timed_group([0])[0] for _ in range(5))
    found["alone_s"] = alone
    print(f"one loop alone on CPU 0: {alone * 1e3:.1f} ms")
    pairs = {}
    for other in cpus[1:]:
        pairs[other] = round(timed_group([0, other])[0] / alone, 3)
    found["beside_cpu0"] = pairs
    slow = {cpu: ratio for cpu, ratio in pairs.items() if ratio > 1.25}
    print(f"CPU 0's loop beside a loop on each other CPU, slowdowns over 1.25x: {slow}")
    half = len(cpus) // 2
    groups = {}
    for count in (c for c in (2, 4, 8, 12, 16) if 2 * c <= len(cpus)):  # every placement fits
        placements: dict[str, Sequence[int | None]] = {
            "unpinned": [None] * count,
            "consecutive": cpus[:count],
            "every_other": cpus[: 2 * count : 2],
            "spread": cpus[:: max(1, len(cpus) // count)][:count],
            "first_half": [cpus[i % half] for i in range(count)],
        }
        for name, placement in placements.items():
            ratios = [
                statistics.median(seconds) / alone
                for seconds in (timed_group(placement) for _ in range(3))
            ]
            groups[f"{count}:{name}"] = round(statistics.median(ratios), 3)
        print(
            f"{count:2d} loops, median slowdown: "
            + ", ".join(
                f"{k.split(':')[1]} {v:.2f}x"
                for k, v in groups.items()
                if k.startswith(f"{count}:")
            )
        )
    found["groups"] = groups
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
