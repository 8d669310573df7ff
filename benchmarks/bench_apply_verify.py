"""What verify on first use costs: the first call of a key, and every call after it.

A user dataset's definition (``axpby_h1000``: x, y [n, 1000], alpha; the reference and the winner
both compute ``alpha * x + y``, the winner being a solution kernelarena does not ship, so verify
checks it). First call: for each of ``--keys`` new row counts (near the measured one, so the
table's winner runs there), the wall time of the first call with verify off and on, in fresh
runtimes alternated ``--repeats`` times; the difference is the check (copies of the inputs, the
reference, the comparison, a second call of the solution). Steady state: the paired per-call
loop of ``bench_apply_overhead`` (apply against the winner called directly) with verify off, on,
and with ``verify_every`` of 100 and 10 (a counter per call, and every K-th call compared).

Results: benchmarks/results/apply_verify_<device>_<date>[_<label>].json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import kernelarena
from benchmarks.bench_apply_overhead import (
    AXPBY,
    _summary,
    add_winner,
    axpby_definition,
    looped,
    measure,
)
from benchmarks.harness import environment, write_report
from kernelarena.compile import build_solution
from kernelarena.data import TraceSet
from kernelarena.evaluate.environment import hardware_name

NAME = "axpby_h1000"


def write_dataset(root: Path, device: torch.device) -> Any:
    dataset = TraceSet(root=root)
    spec = axpby_definition(NAME)
    source = "def run(x, y, alpha):\n    return alpha * x + y\n"
    solution = add_winner(dataset, spec, source, {"n": AXPBY[0]}, hardware_name(device), False)
    return spec, solution


def axpby(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return alpha * x + y


def first_calls(root: Path, device: torch.device, keys: int, verify: bool) -> list[float]:
    """Microseconds of the first call at each of ``keys`` new row counts in a fresh runtime
    (after one first call that loads the table and builds the winner, not kept)."""
    kernelarena.enable_apply(root, verify=verify)
    routed = kernelarena.apply(NAME)(axpby)
    rows = [AXPBY[0], *range(8, 8 + keys)]  # 8-15: one power-of-two bucket from the measured 7
    samples = []
    for n in rows:
        x, y = (torch.randn(n, AXPBY[1], device=device) for _ in range(2))
        _synchronize(device)
        start = time.perf_counter()
        routed(x, y, 0.5)
        _synchronize(device)
        samples.append((time.perf_counter() - start) * 1e6)
    kernelarena.disable_apply()
    return samples[1:]


def steady(root: Path, device: torch.device, arguments: argparse.Namespace) -> list[dict[str, Any]]:
    spec, solution = arguments.made
    fn = build_solution(spec, solution, str(device)).fn
    x, y = (torch.randn(*AXPBY, device=device) for _ in range(2))
    rows = []
    for label, verify, every in (
        ("verify off", False, 0),
        ("verify on", True, 0),
        ("verify on, re-check every 100 calls", True, 100),
        ("verify on, re-check every 10 calls", True, 10),
    ):
        kernelarena.enable_apply(root, verify=verify, verify_every=every)
        routed = kernelarena.apply(NAME)(axpby)
        routed(x, y, 0.5)
        case = {"direct": looped(fn, (x, y, 0.5)), "apply": looped(routed, (x, y, 0.5))}
        clock = time.thread_time_ns if device.type == "cpu" else time.perf_counter_ns
        (row,) = measure({label: case}, arguments.calls, arguments.rounds, clock)
        rows.append(row)
        kernelarena.disable_apply()
    return rows


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--keys", type=int, default=8, help="new keys per first-call sample")
    parser.add_argument("--repeats", type=int, default=5, help="fresh runtimes per setting")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--label", default="")
    parser.add_argument("--output", type=Path, help="write here instead of benchmarks/results/")
    parser.add_argument("--no-write", action="store_true")
    arguments = parser.parse_args()
    device = torch.device(arguments.device)
    root = Path(tempfile.mkdtemp(prefix="kernelarena-bench-verify-"))
    arguments.made = write_dataset(root, device)
    first: dict[str, list[float]] = {"verify off": [], "verify on": []}
    for _ in range(arguments.repeats):
        for label, verify in (("verify off", False), ("verify on", True)):
            first[label] += first_calls(root, device, arguments.keys, verify)
    report = {
        "benchmark": "apply_verify",
        "environment": environment(device),
        "method": {
            k: v for k, v in vars(arguments).items() if k not in ("made", "no_write", "output")
        },
        "shape": list(AXPBY),
        "first_call_us": {label: _summary(samples) for label, samples in first.items()},
        "first_call_added_us": statistics.median(first["verify on"])
        - statistics.median(first["verify off"]),
        "steady_ns": steady(root, device, arguments),
    }
    _print(report)
    if arguments.output is not None:
        arguments.output.write_text(json.dumps(report, indent=1, default=str) + "\n")
    elif not arguments.no_write:
        print(f"wrote {write_report('apply_verify', report, arguments.label)}")


def _print(report: dict[str, Any]) -> None:
    print(f"verify on first use, {report['environment'].get('device')}, {report['shape']}")
    for label, figures in report["first_call_us"].items():
        print(
            f"  first call of a key, {label}: {figures['median']:.0f} us "
            f"(p20-p80 {figures['p20']:.0f}-{figures['p80']:.0f})"
        )
    print(f"  added by the check: {report['first_call_added_us']:.0f} us")
    for row in report["steady_ns"]:
        added = row["added_ns"]
        print(
            f"  per call after the first, {row['case']}: +{added['median']:.0f} ns over the "
            f"winner called directly (p20-p80 {added['p20']:.0f}-{added['p80']:.0f})"
        )


if __name__ == "__main__":
    main()
