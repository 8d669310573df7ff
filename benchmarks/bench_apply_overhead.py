"""What apply adds per call over calling the winning solution directly, and what it costs when off.

The winner is a trivial Python solution (it returns at once), so the numbers are apply's own: the
key over the arguments, the dict lookup, the prepared call. CPU tensors, tiny shapes. Cases: one
tensor input (scale-shaped: x, factor -> out) and two (rmsnorm-shaped: x, weight, eps -> out), each
called destination-passing (outputs given) and value-returning (apply allocates; the direct call
allocates the same tensor inline, as apply does: torch.empty_like of the input of its shape); plus
apply turned off (the decorated function against its own body).

Method: per round, each variant runs ``--calls`` calls in a plain loop, in shuffled order; a round
gives one per-call time per variant. Added cost = median over rounds of (apply - direct) in the
same round, so drift of a shared machine cancels; the 20th/80th percentiles are reported too.
Bar: at most 1 microsecond median added (flashinfer-bench 0.1.2's apply adds 13 us on an H200
host, 2026-11-22). Results: benchmarks/results/apply_overhead_<device>_<date>.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("KERNELARENA_CACHE", tempfile.mkdtemp(prefix="kernelarena-bench-"))

import torch

import kernelarena
from benchmarks.harness import environment, result_path
from kernelarena.build import build_solution
from kernelarena.data import (
    BuildSpec,
    Definition,
    Environment,
    Performance,
    RandomInput,
    ScalarInput,
    Solution,
    SourceFile,
    Status,
    TraceSet,
    Workload,
)
from kernelarena.evaluate.environment import hardware_name
from kernelarena.evaluate.options import make_trace

BAR_NS = 1000.0
Loop = Callable[[int], None]


def definition(name: str, tensors: list[str]) -> Definition:
    shapes = {"x": ["rows", "cols"], "weight": ["cols"]}
    inputs: dict[str, Any] = {t: {"shape": shapes[t], "dtype": "float32"} for t in tensors}
    inputs["factor"] = {"shape": None, "dtype": "float32"}
    return Definition.model_validate(
        {
            "name": name,
            "op_type": "bench",
            "axes": {"rows": {"type": "var"}, "cols": {"type": "var"}},
            "inputs": inputs,
            "outputs": {"out": {"shape": ["rows", "cols"], "dtype": "float32"}},
            "reference": "def run(*args):\n    return args[0] * 1.0\n",
        }
    )


def winner_of(
    trace_set: TraceSet, spec: Definition, shape: tuple[int, int], device: torch.device
) -> Solution:
    arguments = ", ".join([*spec.inputs, "out"])
    solution = Solution(
        name=f"{spec.name}_trivial",
        definition=spec.name,
        author="bench",
        spec=BuildSpec(language="python", target_hardware=["cpu", "cuda"], entry_point="s.py::run"),
        sources=[SourceFile(path="s.py", content=f"def run({arguments}):\n    return None\n")],
    )
    workload = Workload(
        axes={"rows": shape[0], "cols": shape[1]},
        inputs={
            n: ScalarInput(value=1.0) if s.shape is None else RandomInput()
            for n, s in spec.inputs.items()
        },
        uuid=f"{spec.name}-bench",
    )
    performance = Performance(latency_ms=1e-3, latency_p20_ms=1e-3, latency_p80_ms=1e-3)
    trace = make_trace(
        spec,
        solution,
        workload,
        Environment(hardware=hardware_name(device)),
        Status.PASSED,
        "",
        None,
        performance,
    )
    trace_set.add_definition(spec, persist=False)
    trace_set.add_solution(solution, persist=False)
    trace_set.add_workload(spec.name, workload, persist=False)
    trace_set.traces.setdefault(spec.name, []).append(trace)
    return solution


def looped(call: Callable[..., Any], args: tuple[Any, ...]) -> Loop:
    def loop(n: int) -> None:
        for _ in range(n):
            call(*args)

    return loop


def variants(
    trace_set: TraceSet, device: torch.device
) -> tuple[dict[str, dict[str, Loop]], dict[str, dict[str, Loop]]]:
    """(cases with apply on, cases with apply off): per case {"direct": loop, "apply": loop}."""
    shape = (4, 8)
    on: dict[str, dict[str, Loop]] = {}
    off: dict[str, dict[str, Loop]] = {}
    for label, tensors in (("1 tensor", ["x"]), ("2 tensors", ["x", "weight"])):
        spec = definition(f"bench_{len(tensors)}", tensors)
        solution = winner_of(trace_set, spec, shape, device)
        fn = build_solution(spec, solution, str(device)).fn
        inputs = tuple(
            torch.zeros(shape if t == "x" else shape[1:], device=device) for t in tensors
        )
        args, out = (*inputs, 1.5), torch.empty(shape, device=device)

        def body(*given: Any) -> Any:
            return None

        routed = kernelarena.apply(spec.name)(body)

        def direct_value(n: int, fn: Any = fn, args: tuple[Any, ...] = args) -> None:
            # As apply allocates: like the input of the output's shape and dtype, contiguous.
            empty_like, contiguous = torch.empty_like, torch.contiguous_format
            for _ in range(n):
                fn(*args, empty_like(args[0], memory_format=contiguous))

        on[f"{label}, destination-passing"] = {
            "direct": looped(fn, (*args, out)),
            "apply": looped(routed, (*args, out)),
        }
        on[f"{label}, value-returning"] = {"direct": direct_value, "apply": looped(routed, args)}
        off[f"{label}, apply off"] = {
            "direct": looped(body, (*args, out)),
            "apply": looped(routed, (*args, out)),
        }
    return on, off


def measure(cases: dict[str, dict[str, Loop]], calls: int, rounds: int) -> list[dict[str, Any]]:
    samples: dict[tuple[str, str], list[float]] = {}
    order = [(c, v) for c in cases for v in ("direct", "apply")]
    for round_index in range(rounds + 3):  # three rounds of warm-up, not kept
        random.shuffle(order)
        for case, variant in order:
            gc.disable()
            start = time.perf_counter_ns()
            cases[case][variant](calls)
            elapsed = time.perf_counter_ns() - start
            gc.enable()
            if round_index >= 3:
                samples.setdefault((case, variant), []).append(elapsed / calls)
    rows = []
    for case in cases:
        direct, applied = samples[(case, "direct")], samples[(case, "apply")]
        added = [a - d for a, d in zip(applied, direct, strict=True)]
        rows.append(
            {
                "case": case,
                "direct_ns": _summary(direct),
                "apply_ns": _summary(applied),
                "added_ns": _summary(added),
            }
        )
    return rows


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    quantiles = statistics.quantiles(ordered, n=10)
    return {"median": statistics.median(ordered), "p20": quantiles[1], "p80": quantiles[7]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per sample")
    parser.add_argument("--rounds", type=int, default=200, help="samples per variant")
    parser.add_argument("--device", default="cpu", help="where the tensors live: cpu or cuda")
    parser.add_argument("--no-write", action="store_true")
    arguments = parser.parse_args()
    device = torch.device(arguments.device)
    trace_set = TraceSet(root=None)
    on, off = variants(trace_set, device)
    kernelarena.enable_apply(trace_set, use_cache=False)
    for loops in on.values():
        loops["apply"](1)  # the first call of the key: table, build, entry
    rows = measure(on, arguments.calls, arguments.rounds)
    kernelarena.disable_apply()
    rows += measure(off, arguments.calls, arguments.rounds)
    env = environment(device)
    env["cpu"] = _cpu_model()
    if device.type == "cpu":  # the host's processor and core count name the result file
        env["device"] = f"{env['cpu']} x{os.cpu_count()}"
    report: dict[str, Any] = {
        "benchmark": "apply_overhead",
        "environment": env,
        "method": {
            "calls_per_sample": arguments.calls,
            "rounds": arguments.rounds,
            "shape": [4, 8],
        },
        "bar_ns": BAR_NS,
        "meets_bar": all(r["added_ns"]["median"] <= BAR_NS for r in rows),
        "rows": rows,
    }
    _print(report)
    if not arguments.no_write:
        path = result_path("apply_overhead", report["environment"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {path}")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _print(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"apply overhead on {report['environment'].get('device')} (ns per call)")
    for column in ("case", "direct", "through apply", "added median", "added p20-p80"):
        table.add_column(column, justify="left" if column == "case" else "right")
    for row in report["rows"]:
        added = row["added_ns"]
        table.add_row(
            row["case"],
            f"{row['direct_ns']['median']:.0f}",
            f"{row['apply_ns']['median']:.0f}",
            f"{added['median']:.0f}",
            f"{added['p20']:.0f}-{added['p80']:.0f}",
        )
    Console(width=120).print(table)
    print(f"bar: {report['bar_ns']:.0f} ns added (median); met: {report['meets_bar']}")


if __name__ == "__main__":
    main()
