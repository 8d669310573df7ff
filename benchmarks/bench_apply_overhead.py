"""What apply adds per call over calling the winning solution directly, and what it costs when off.

Every definition here lives in a dataset folder on disk, enabled as a user's is
(``enable_apply(folder)``: the built-in library, its shipped traces and the folder), and each
winner is a trivial Python solution (it returns at once), so the numbers are apply's own: the
guard or the key over the arguments, the prepared call, and for ``kernelarena.ops``-style
operators the operator function (and, in its own row, torch.library's dispatcher). Cases:

- one tensor input (x, factor -> out) and two (x, weight, eps -> out), each called
  destination-passing (outputs given) and value-returning (apply allocates; the direct call
  allocates the same tensor inline, as apply does: ``torch.empty_like`` of the input);
- ``axpby_h1000`` (x, y [n, 1000] with a const axis, alpha; 7 x 1000): positional, by keyword,
  with a default left out, and under ``torch.inference_mode``; and the same with the real body
  ``alpha * x + y`` as the winner (informational: the body's own time dominates the spread);
- a two-tensor operator made as ``kernelarena.ops`` makes its own (``make_operator``), called as
  the plain function and as ``torch.ops.<namespace>.<name>`` (the dispatcher, informational);
- apply turned off (the decorated function against its own body).

Method: per round, each variant runs ``--calls`` calls in a plain loop, in shuffled order; a round
gives one per-call time per variant. Added cost = median over rounds of (apply - direct) in the
same round, so drift cancels; the 20th/80th percentiles are reported too. The clock is the
thread's CPU time by default (``--clock thread``): on a shared machine, time the process spends
descheduled is not apply's; ``--clock wall`` uses perf_counter. Bar: at most 1 microsecond median
added on rows marked "bar" on a CPU-only machine, 0.5 with ``--device cuda`` (a GPU host's CPU;
flashinfer-bench 0.1.2's apply adds 13 us on an H200 host). The report says which hot path was
measured: compiled (``dispatch/fastcall.py``) or the Python wrapper (and why).
Results: benchmarks/results/apply_overhead_<device>_<date>[_<label>].json.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import inspect
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
from benchmarks.harness import environment, write_report
from kernelarena.compile import build_solution
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
from kernelarena.dispatch.ops import make_operator
from kernelarena.evaluate.environment import hardware_name
from kernelarena.evaluate.options import make_trace

# ns added per call, median, on rows marked "bar": per kind of device the tensors live on.
BAR_NS = {"cpu": 1000.0, "cuda": 500.0}
SHAPE = (4, 8)
AXPBY = (7, 1000)
Loop = Callable[[int], None]
Case = dict[str, Any]  # {"direct": Loop, "apply": Loop, "bar": bool}


def scale_definition(name: str, tensors: list[str]) -> Definition:
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


def axpby_definition(name: str) -> Definition:
    return Definition.model_validate(
        {
            "name": name,
            "op_type": "axpby",
            "axes": {"n": {"type": "var"}, "h": {"type": "const", "value": AXPBY[1]}},
            "inputs": {
                "x": {"shape": ["n", "h"], "dtype": "float32"},
                "y": {"shape": ["n", "h"], "dtype": "float32"},
                "alpha": {"shape": None, "dtype": "float32"},
            },
            "outputs": {"out": {"shape": ["n", "h"], "dtype": "float32"}},
            "reference": "def run(x, y, alpha):\n    return alpha * x + y\n",
        }
    )


def add_winner(
    dataset: TraceSet,
    spec: Definition,
    source: str,
    axes: dict[str, int],
    hardware: str,
    destination_passing: bool,
) -> Solution:
    """``source`` (a ``run`` function) as the only solution of ``spec``, measured at ``axes`` on
    ``hardware``."""
    solution = Solution(
        name=f"{spec.name}_winner",
        definition=spec.name,
        author="bench",
        spec=BuildSpec(
            language="python",
            target_hardware=["cpu", "cuda"],
            entry_point="s.py::run",
            destination_passing_style=destination_passing,
        ),
        sources=[SourceFile(path="s.py", content=source)],
    )
    inputs: dict[str, Any] = {
        n: ScalarInput(value=1.0) if s.shape is None else RandomInput()
        for n, s in spec.inputs.items()
    }
    workload = Workload(axes=axes, inputs=inputs, uuid=f"{spec.name}-bench")
    performance = Performance(latency_ms=1e-3, latency_p20_ms=1e-3, latency_p80_ms=1e-3)
    environment_ = Environment(hardware=hardware)
    dataset.add_definition(spec)
    dataset.add_solution(solution)
    dataset.add_workload(spec.name, workload)
    dataset.append_trace(
        make_trace(spec, solution, workload, environment_, Status.PASSED, "", None, performance)
    )
    return solution


Made = dict[str, tuple[Definition, Solution]]


def write_dataset(root: Path, device: torch.device) -> Made:
    """The benchmark's definitions and winners, saved as a user's dataset folder."""
    dataset, hardware = TraceSet(root=root), hardware_name(device)
    made: dict[str, tuple[Definition, Solution]] = {}
    rows, cols = SHAPE
    for tensors in (["x"], ["x", "weight"]):
        spec = scale_definition(f"bench_{len(tensors)}", tensors)
        source = f"def run({', '.join([*spec.inputs, 'out'])}):\n    return None\n"
        axes = {"rows": rows, "cols": cols}
        made[spec.name] = (spec, add_winner(dataset, spec, source, axes, hardware, True))
    for name, body in (("axpby_h1000", "x"), ("axpby_body_h1000", "alpha * x + y")):
        spec = axpby_definition(name)
        source = f"def run(x, y, alpha):\n    return {body}\n"
        made[name] = (spec, add_winner(dataset, spec, source, {"n": AXPBY[0]}, hardware, False))
    return made


def looped(call: Callable[..., Any], args: tuple[Any, ...], **kwargs: Any) -> Loop:
    def loop(n: int) -> None:
        for _ in range(n):
            call(*args, **kwargs)

    return loop


def under_inference_mode(loop: Loop) -> Loop:
    def inside(n: int) -> None:
        with torch.inference_mode():
            loop(n)

    return inside


def allocating(fn: Callable[..., Any], args: tuple[Any, ...]) -> Loop:
    """The direct value-returning call: allocates like apply does (like the input, contiguous)."""

    def loop(n: int) -> None:
        empty_like, contiguous = torch.empty_like, torch.contiguous_format
        for _ in range(n):
            fn(*args, empty_like(args[0], memory_format=contiguous))

    return loop


def scale_cases(made: Made, device: torch.device) -> tuple[dict[str, Case], dict[str, Case]]:
    """(cases with apply on, cases with apply off) of the one- and two-tensor definitions."""
    on: dict[str, Case] = {}
    off: dict[str, Case] = {}
    for label, name in (("1 tensor", "bench_1"), ("2 tensors", "bench_2")):
        spec, solution = made[name]
        fn = build_solution(spec, solution, str(device)).fn
        inputs = tuple(
            torch.randn(SHAPE if t == "x" else SHAPE[1:], device=device)
            for t in spec.inputs
            if t != "factor"
        )
        args, out = (*inputs, 1.5), torch.empty(SHAPE, device=device)

        def body(*given: Any) -> Any:
            return None

        routed = kernelarena.apply(name)(body)
        on[f"{label}, destination-passing"] = {
            "direct": looped(fn, (*args, out)),
            "apply": looped(routed, (*args, out)),
        }
        on[f"{label}, value-returning"] = {
            "direct": allocating(fn, args),
            "apply": looped(routed, args),
        }
        off[f"{label}, apply off"] = {
            "direct": looped(body, (*args, out)),
            "apply": looped(routed, (*args, out)),
        }
    return on, off


def axpby_cases(made: Made, device: torch.device) -> dict[str, Case]:
    """The user-dataset definition with a const axis, called every way a program may call it."""
    spec, solution = made["axpby_h1000"]
    fn = build_solution(spec, solution, str(device)).fn
    x, y = (torch.randn(*AXPBY, device=device) for _ in range(2))

    def axpby(x: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
        return alpha * x + y

    routed = kernelarena.apply("axpby_h1000")(axpby)
    body_spec, body_solution = made["axpby_body_h1000"]
    body_fn = build_solution(body_spec, body_solution, str(device)).fn
    routed_body = kernelarena.apply("axpby_body_h1000")(axpby)
    user = "axpby_h1000 7x1000"
    return {
        f"{user}, positional": {
            "direct": looped(fn, (x, y, 0.5)),
            "apply": looped(routed, (x, y, 0.5)),
        },
        f"{user}, alpha by keyword": {
            "direct": looped(fn, (x, y), alpha=0.5),
            "apply": looped(routed, (x, y), alpha=0.5),
        },
        f"{user}, alpha left at its default": {
            "direct": looped(fn, (x, y, 1.0)),
            "apply": looped(routed, (x, y)),
        },
        f"{user}, inside torch.inference_mode": {
            "direct": under_inference_mode(looped(fn, (x, y, 0.5))),
            "apply": under_inference_mode(looped(routed, (x, y, 0.5))),
        },
        f"{user}, winner computes alpha * x + y (informational)": {
            "direct": looped(body_fn, (x, y, 0.5)),
            "apply": looped(routed_body, (x, y, 0.5)),
            "bar": False,
        },
    }


def operator_cases(made: Made, device: torch.device) -> dict[str, Case]:
    """An operator made as ``kernelarena.ops`` makes its own, over the two-tensor definition."""
    spec, solution = made["bench_2"]
    fn = build_solution(spec, solution, str(device)).fn
    operator = make_operator("bench_two", [spec], namespace="kernelarena_bench")
    x, weight = torch.randn(SHAPE, device=device), torch.randn(SHAPE[1], device=device)
    custom = torch.ops.kernelarena_bench.bench_two
    return {
        "kernelarena.ops operator (2 tensors, value-returning)": {
            "direct": allocating(fn, (x, weight, 1.5)),
            "apply": looped(operator, (x, weight, 1.5)),
        },
        "the same through torch.ops (torch.library's dispatcher, informational)": {
            "direct": allocating(fn, (x, weight, 1.5)),
            "apply": looped(custom, (x, weight, 1.5)),
            "bar": False,
        },
    }


def measure(
    cases: dict[str, Case], calls: int, rounds: int, clock: Callable[[], int]
) -> list[dict[str, Any]]:
    samples: dict[tuple[str, str], list[float]] = {}
    order = [(c, v) for c in cases for v in ("direct", "apply")]
    for round_index in range(rounds + 3):  # three rounds of warm-up, not kept
        random.shuffle(order)
        for case, variant in order:
            gc.disable()
            start = clock()
            cases[case][variant](calls)
            elapsed = clock() - start
            gc.enable()
            if round_index >= 3:
                samples.setdefault((case, variant), []).append(elapsed / calls)
    rows = []
    for case, loops in cases.items():
        direct, applied = samples[(case, "direct")], samples[(case, "apply")]
        added = [a - d for a, d in zip(applied, direct, strict=True)]
        rows.append(
            {
                "case": case,
                "bar": loops.get("bar", True),
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
    parser.add_argument("--clock", choices=("thread", "wall"), default="thread")
    parser.add_argument("--label", default="", help="suffix of the result file's name")
    parser.add_argument("--output", type=Path, help="write here instead of benchmarks/results/")
    parser.add_argument("--no-write", action="store_true")
    arguments = parser.parse_args()
    device = torch.device(arguments.device)
    clock = time.thread_time_ns if arguments.clock == "thread" else time.perf_counter_ns
    root = Path(tempfile.mkdtemp(prefix="kernelarena-bench-dataset-"))
    made = write_dataset(root, device)
    on, off = scale_cases(made, device)
    on |= axpby_cases(made, device) | operator_cases(made, device)
    # As a user's folder (with the library and its traces). The trivial winners are wrong on
    # purpose: verify would drop them (what it costs is bench_apply_verify's to measure). Asked
    # only where enable_apply has the option, so that this script also times older code.
    has_verify = "verify" in inspect.signature(kernelarena.enable_apply).parameters
    kernelarena.enable_apply(root, **({"verify": False} if has_verify else {}))
    for loops in on.values():
        loops["apply"](1)  # the first call of the key: table, build, entry
    rows = measure(on, arguments.calls, arguments.rounds, clock)
    kernelarena.disable_apply()
    rows += measure(off, arguments.calls, arguments.rounds, clock)
    report = _report(rows, arguments, device)
    _print(report)
    if arguments.output is not None:
        arguments.output.write_text(json.dumps(report, indent=1) + "\n")
    elif not arguments.no_write:
        print(f"wrote {write_report('apply_overhead', report, arguments.label)}")


def _report(
    rows: list[dict[str, Any]], arguments: argparse.Namespace, device: torch.device
) -> dict[str, Any]:
    env = environment(device)
    bar = BAR_NS.get(device.type, BAR_NS["cuda"])
    env["cpu"] = _cpu_model()
    env["cpus"] = os.cpu_count()
    with contextlib.suppress(OSError):
        env["load_average"] = os.getloadavg()
    if device.type == "cpu":  # the host's processor and core count name the result file
        env["device"] = f"{env['cpu']} x{os.cpu_count()}"
    return {
        "benchmark": "apply_overhead",
        "environment": env,
        "method": {
            "calls_per_sample": arguments.calls,
            "rounds": arguments.rounds,
            "clock": arguments.clock,
            "source": str(Path(kernelarena.__file__).resolve().parent),
            "shapes": {"scale": list(SHAPE), "axpby": list(AXPBY)},
        },
        "apply_path": _apply_path(),
        "bar_ns": bar,
        "meets_bar": all(r["added_ns"]["median"] <= bar for r in rows if r["bar"]),
        "rows": rows,
    }


def _apply_path() -> str:
    """``compiled`` or ``Python (why)``: the hot path the decorated functions here got."""
    try:
        from kernelarena.dispatch import fastcall
    except ImportError:  # code from before the compiled hot path
        return "Python (no compiled hot path in this version)"
    return fastcall.status()


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

    device = report["environment"].get("device")
    title = f"apply overhead on {device}, hot path {report['apply_path']} (ns per call)"
    table = Table(title=title)
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
    Console(width=140).print(table)
    print(
        f"bar: {report['bar_ns']:.0f} ns added (median, rows marked bar); met: {report['meets_bar']}"
    )


if __name__ == "__main__":
    main()
