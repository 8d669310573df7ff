"""Which history of a process makes its CUDA graphs replay with longer gaps between kernels?

    python benchmarks/probes/probe_graph_state.py             # every scenario, one fresh process each
    python benchmarks/probes/probe_graph_state.py SCENARIO    # one, in this process

A 60-call graph of the Triton rmsnorm_bf16 solution at 128x4096 (sets and graph as
``probe_small_shape_timing.py`` makes them, timed as ``evaluate.sandbox.graph_timing.time_replays`` does),
its per-call time before and after the scenario's step. On an H200 (2026-11-26,
logs/timing_state_2026-11-26_s10.txt and _s11.txt): 2.31 us a call until work that allocates (a
warm-up's results, a + b, the capture of torch eager code) has run on a stream other than the
default one, 2.66 from then on (the profiler: the same 2.27 us kernels, 0.1 against 0.45 us between
them), for every graph of the process and for good; allocating on the default stream, freeing,
capturing or replaying graphs of calls that allocate no intermediates, and tiny kernels that
allocate nothing on other streams change nothing. An H100 shows the same (2.48 against 2.83 us);
there, and on a fresh H200, the first process after the machine started was in the slow state from
its start: the state is not the process's alone.

``evaluate.sandbox.graph_timing.capture_graph`` now settles every timing process in the lasting state
before its first graph (``settle_graph_state``, 2026-11-26, eleventh session); this probe marks
the device settled first so that its scenarios still start from whatever state the process is in,
and the ``settle`` scenario runs that step itself.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import torch
from probe_small_shape_timing import HIDDEN, ROWS, allocator_sets, graph_of


def _other_graph(device: torch.device, kernel: Callable[[], Any]) -> Any:
    """A one-kernel graph captured on a side stream with no eager work there, and replayed."""
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream(device)
    with torch.cuda.stream(stream):
        graph.capture_begin()
        kernel()
        graph.capture_end()
    graph.replay()
    torch.cuda.synchronize(device)
    return graph


def _side_stream_work(device: torch.device, kernel: Callable[[], Any]) -> None:
    with torch.cuda.stream(torch.cuda.Stream(device)):
        for _ in range(10):
            kernel()
    torch.cuda.synchronize(device)


def run(scenario: str) -> str:
    from kernelarena.compile import build_solution
    from kernelarena.evaluate.sandbox import graph_timing
    from kernelarena.evaluate.sandbox.graph_timing import graph_calls, sets_filling_l2, time_replays
    from kernelarena.library import load_library

    device = torch.device("cuda:0")
    graph_timing._SETTLED_DEVICES.add(0)  # the probe's graphs start from the process's own state
    library = load_library()
    definition = library.definitions["rmsnorm_bf16"]
    solution = build_solution(definition, library.solutions["rmsnorm_bf16_triton"], "cuda:0")
    count = sets_filling_l2(2 * ROWS * HIDDEN * 2 + HIDDEN * 2, device)
    calls = graph_calls(count)
    sets = allocator_sets(count, device)
    a, b = torch.randn(1 << 20, device=device), torch.randn(1 << 20, device=device)

    def per_call_us(timed: Any) -> float:
        return statistics.median(
            time_replays(timed, device, calls).median_ms * 1e3 for _ in range(3)
        )

    kept: list[Any] = []
    first = graph_of(solution, sets, device)
    before = per_call_us(first)
    if scenario == "second_graph":  # warm-up on a new side stream, capture, replay
        kept.append(graph_of(solution, sets, device))
    elif scenario == "side_stream_work":
        _side_stream_work(device, lambda: a + b)
    elif scenario == "other_graph_replayed":
        kept.append(_other_graph(device, lambda: a * 2))
    elif scenario == "settle":
        graph_timing._SETTLED_DEVICES.discard(0)
        graph_timing.settle_graph_state(device)
    elif scenario == "free_memory":
        block = torch.empty(64 << 20, device=device, dtype=torch.uint8)
        del block
        torch.cuda.empty_cache()
    return f"{scenario:22s} {before:.3f} us a call, after the step {per_call_us(first):.3f} us"


SCENARIOS = (
    "nothing",
    "second_graph",
    "side_stream_work",
    "settle",
    "other_graph_replayed",
    "free_memory",
)


def main() -> None:
    if len(sys.argv) > 1:
        print(run(sys.argv[1]), flush=True)
        return
    print(torch.cuda.get_device_name())
    for scenario in SCENARIOS:
        subprocess.run([sys.executable, __file__, scenario], check=False)


if __name__ == "__main__":
    main()
