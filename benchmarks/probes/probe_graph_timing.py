"""Development aid: where the time of a CUDA-graph-timed decode call goes. For the Triton
attention_decode (the working tree's and ``--baseline FILE``'s) on a few shapes, each timed as
graph replays over input sets rotated past the L2, the way ``bench_attention`` does (20 calls a
graph), and varied one thing at a time:

- ``calls``: 20, 50 and 100 calls a graph (a fixed cost a replay is shared by more calls);
- ``lead``: a spin kernel queued before the start event, long enough to cover the host's
  submission of the graph (what is left is the GPU's own time);
- ``host``: the host's time to submit one replay (``graph.replay()`` returning).

Outputs are poisoned and checked against the float32 reference before timing (``--unchecked``
times a variant that fails, for experiments that skip work). ``--bench-sets`` also times the
library's performance workloads with bench_attention's own input sets and timer. Prints a table
and writes ``$OUT/probe_graph_timing.json``.

    python benchmarks/probes/probe_graph_timing.py [--baseline FILE ...] [--shapes 1x8192,4x8192] [--quick]
        [--bench-sets] [--unchecked]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_decode import Shape, load_baseline

from kernelarena.evaluate.sandbox.graph_timing import capture_graph
from kernelarena.evaluate.sandbox.timing import lead_spin_cycles
from kernelarena.testing import build

REPLAYS = 20


def time_graph(graph: Any, calls: int, lead_us: float) -> tuple[float, float]:
    """(median GPU ms a call, median host ms a submission) over ``REPLAYS`` replays."""
    stream = torch.cuda.current_stream()
    spin_cycles = lead_spin_cycles(torch.device("cuda"), lead_us)
    samples, host = [], []
    for _ in range(REPLAYS):
        if spin_cycles:
            torch.cuda._sleep(spin_cycles)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        submitted = time.perf_counter()
        graph.replay()
        host.append(time.perf_counter() - submitted)
        end.record(stream)
        end.synchronize()
        samples.append(start.elapsed_time(end) / calls)
    samples.sort()
    host.sort()
    return samples[len(samples) // 2], host[len(host) // 2] * 1e3


def bench_sets(shapes: str, run: Any, device: torch.device) -> list[dict]:
    """The library's performance workloads of these shapes with bench_attention's input sets,
    timed by its timer (``time_cuda_graph``) and by ``time_graph`` above, in this process."""
    from benchmarks.bench_attention import decode_sets, prepared

    from kernelarena.evaluate.sandbox.graph_timing import time_cuda_graph
    from kernelarena.library import load_library
    from kernelarena.runtime.inputs import allocate_outputs

    name, records = "attention_decode_bf16", []
    for text in shapes.split(","):
        batch, cache = (int(v) for v in text.split("x"))
        workload = next(
            w
            for w in load_library().workloads_for(name, tags=("performance",))
            if w.axes["batch"] == batch and w.axes["max_seq"] == cache and not w.params
        )
        definition, axes, arguments, _ = prepared(name, workload, device)
        sets = decode_sets(definition, workload, axes, arguments, device)
        outputs = [list(allocate_outputs(definition, axes, device).values()) for _ in sets]

        def call(i: int, sets: list = sets, outputs: list = outputs) -> Any:
            return run(*sets[i % len(sets)], *outputs[i % len(sets)])

        call(0)
        harness_ms = time_cuda_graph(call, device).median_ms
        graph = capture_graph(call, device, calls=20, warmup=2)
        own_ms, _ = time_graph(graph, 20, 0.0)
        del graph
        kv = 2 * int(arguments[3].sum()) * axes["kv_heads"] * axes["head_dim"] * 2
        print(
            f"b{batch} cache {cache} bench sets ({len(sets)}): time_cuda_graph "
            f"{harness_ms * 1e3:.2f} us, time_graph {own_ms * 1e3:.2f} us; seq_lens "
            f"{arguments[3].tolist()[:4]}, k stride {tuple(arguments[1].stride())}, "
            f"q {tuple(arguments[0].shape)} {tuple(arguments[0].stride())}, {kv / 1e6:.1f} MB",
            flush=True,
        )
        records.append(
            {
                "shape": text,
                "bench_sets": len(sets),
                "harness_us": harness_ms * 1e3,
                "time_graph_us": own_ms * 1e3,
            }
        )
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, action="append", default=[], help="repeatable")
    parser.add_argument("--shapes", default="1x8192,1x32768,4x8192,8x8192")
    parser.add_argument(
        "--bench-sets", action="store_true", help="also bench_attention's own sets and timer"
    )
    parser.add_argument(
        "--unchecked",
        action="store_true",
        help="time variants that fail the check too (experiments that skip work)",
    )
    parser.add_argument("--quick", action="store_true", help="20 calls a graph, no lead only")
    args = parser.parse_args()
    device = torch.device("cuda")
    solutions = {"now": build("attention_decode_bf16", "triton", "cuda")}
    for path in args.baseline:
        solutions[path.stem[:12]] = load_baseline(path).run
    records = []
    props = torch.cuda.get_device_properties(device)
    print(f"{props.name}, torch {torch.__version__}, {datetime.datetime.now(datetime.UTC):%F %T}")
    if args.bench_sets:
        records += bench_sets(args.shapes, solutions["now"], device)
    for text in args.shapes.split(","):
        batch, cache = (int(v) for v in text.split("x"))
        shape = Shape(batch, cache, False, device)
        first = shape.arguments[0]
        print(
            f"{shape.label}: {shape.sets} sets, seq_lens {first[3].tolist()[:4]}, k stride "
            f"{tuple(first[1].stride())}, q {tuple(first[0].shape)} {tuple(first[0].stride())}"
        )
        for tag, run in solutions.items():

            def call(i: int, run: Any = run, shape: Shape = shape) -> Any:
                s = i % shape.sets
                return run(*shape.arguments[s], *shape.outputs[s])

            problem = shape.check(call)
            if problem:
                print(f"{shape.label} {tag}: WRONG {problem}"[:300])
                if not args.unchecked:
                    continue
            for calls in (20,) if args.quick else (20, 50, 100):
                graph = capture_graph(call, device, calls=calls, warmup=2)
                for lead_us in (0.0,) if args.quick else (0.0, 400.0):
                    gpu_ms, host_ms = time_graph(graph, calls, lead_us)
                    record = {
                        "shape": shape.label,
                        "solution": tag,
                        "calls": calls,
                        "lead_us": lead_us,
                        "us_per_call": gpu_ms * 1e3,
                        "host_submit_us": host_ms * 1e3,
                        "bytes": shape.bytes,
                        "gbps": shape.bytes / (gpu_ms * 1e-3) / 1e9,
                    }
                    records.append(record)
                    print(
                        f"{shape.label:16} {tag:12} calls {calls:3} lead {lead_us:4.0f} us: "
                        f"{gpu_ms * 1e3:7.2f} us a call, {record['gbps']:5.0f} GB/s, "
                        f"host submit {host_ms * 1e3:6.1f} us a replay",
                        flush=True,
                    )
                del graph
            problem = shape.check(call)
            if problem:
                print(f"{shape.label} {tag}: WRONG after replays {problem}")
        del shape
        torch.cuda.empty_cache()
    out = Path(os.environ.get("OUT", "."))
    (out / "probe_graph_timing.json").write_text(
        json.dumps({"device": props.name, "torch": torch.__version__, "records": records}, indent=1)
    )


if __name__ == "__main__":
    main()
