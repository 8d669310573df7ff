"""Graph-replay timing of a 128x4096 rmsnorm (bf16) outside the engine, to compare with its traces:

    python benchmarks/probes/probe_small_shape_timing.py       # on a GPU machine

Per solution of ``rmsnorm_bf16``, three passes each of: replays over input sets from the caching
allocator (as ``benchmarks/bench_norms.py`` makes them), over sets copied into the engine's arena
(``evaluate.sandbox.arena.Arena``, as the judge shares them with a sandbox), and over the allocator's sets
with the GPU kept busy (``torch.cuda._sleep``) while the host submits the graph, so that the
graph's launch falls outside the timed span; and the host's time to launch the graph. Timing as
``evaluate.sandbox.timing`` does it: as many sets as fill twice the L2, every set once per graph, results
held per set.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from kernelarena.compile import Runnable, build_solution
from kernelarena.evaluate.sandbox.arena import Arena
from kernelarena.evaluate.sandbox.graph_timing import (
    capture_graph,
    graph_calls,
    held_per_set,
    sets_filling_l2,
    time_replays,
)
from kernelarena.library import load_library

ROWS, HIDDEN, EPS = 128, 4096, 1e-6
Sets = list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def allocator_sets(count: int, device: torch.device) -> Sets:
    def one() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = torch.randn(ROWS, HIDDEN, device=device, dtype=torch.bfloat16)
        weight = torch.randn(HIDDEN, device=device, dtype=torch.bfloat16)
        return x, weight, torch.empty_like(x)

    return [one() for _ in range(count)]


def arena_sets(count: int, device: torch.device) -> tuple[Sets, Arena]:
    """Fresh draws copied into the engine's arena (``evaluate.sandbox.arena.Arena.share``), one set after
    another as the judge lays them out; the arena must outlive the sets."""
    arena = Arena(device)
    sets = []
    for x, weight, out in allocator_sets(count, device):
        (shared_x, shared_weight, shared_out), _ = arena.share([x, weight, out])
        sets.append((shared_x, shared_weight, shared_out))
    return sets, arena


def graph_of(solution: Runnable, sets: Sets, device: torch.device) -> Any:
    count = len(sets)

    def call(i: int) -> Any:
        x, weight, out = sets[i % count]
        if solution.destination_passing_style:
            return solution(x, weight, EPS, out)
        return solution(x, weight, EPS)

    held, _ = held_per_set(call, count)
    with torch.no_grad():
        return capture_graph(held, device, calls=graph_calls(count))


def replay_us(graph: Any, calls: int, device: torch.device, sleep_cycles: int = 0) -> float:
    """Median per-call time of 30 replays: ``evaluate.sandbox.timing.time_replays`` itself, or its loop with
    the GPU kept busy for ``sleep_cycles`` before each replay's start event."""
    if not sleep_cycles:
        return time_replays(graph, device, calls).median_ms * 1e3
    stream = torch.cuda.current_stream(device)
    samples = []
    for _ in range(30):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(sleep_cycles)
        start.record(stream)
        graph.replay()
        end.record(stream)
        end.synchronize()
        samples.append(start.elapsed_time(end) / calls * 1e3)
    return statistics.median(samples)


def launch_us(graph: Any) -> float:
    samples = []
    for _ in range(30):
        torch.cuda._sleep(200_000)
        began = time.perf_counter()
        graph.replay()
        samples.append((time.perf_counter() - began) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def median_of_passes(graph: Any, calls: int, device: torch.device, sleep_cycles: int = 0) -> float:
    return statistics.median(replay_us(graph, calls, device, sleep_cycles) for _ in range(3))


def main() -> None:
    device = torch.device("cuda:0")
    library = load_library()
    definition = library.definitions["rmsnorm_bf16"]
    count = sets_filling_l2(2 * ROWS * HIDDEN * 2 + HIDDEN * 2, device)
    calls = graph_calls(count)
    allocated = allocator_sets(count, device)
    in_arena, arena = arena_sets(count, device)
    print(f"{count} input sets, {calls} calls a graph")
    for name in ("triton", "cuda", "torch_compile", "liger", "torch_eager"):
        try:
            solution = build_solution(
                definition, library.solutions[f"rmsnorm_bf16_{name}"], "cuda:0"
            )
        except Exception as error:  # a peer that is not installed: reported, skipped
            print(f"{name}: not built: {error}")
            continue
        spread, packed = (
            graph_of(solution, allocated, device),
            graph_of(solution, in_arena, device),
        )
        figures = {
            "allocator sets": median_of_passes(spread, calls, device),
            "arena sets": median_of_passes(packed, calls, device),
            "launch outside the span": median_of_passes(spread, calls, device, 200_000),
        }
        shown = ", ".join(f"{k} {v:.3f} us" for k, v in figures.items())
        print(f"{name:14s} {shown}; host launch of the graph {launch_us(spread):.1f} us")
    arena.close()


if __name__ == "__main__":
    main()
