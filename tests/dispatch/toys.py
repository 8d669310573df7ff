"""Test-local definitions, marker solutions and synthetic traces for the dispatch tests.

The marker solutions fill their output with a constant of their own (1, 2, 3), so a result shows
which one ran; the fallbacks return -1. Traces are made with the evaluator's ``make_trace`` and an
Environment on this machine's CPU hardware string, so tables built here admit them.
"""

from __future__ import annotations

import uuid
from typing import Any

import torch

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
    Trace,
    TraceSet,
    Workload,
)
from kernelarena.evaluate.environment import hardware_name
from kernelarena.evaluate.options import make_trace

CPU = hardware_name(torch.device("cpu"))
OTHER_GPU = "NVIDIA Imaginary 9000"


def toy_definition(dtype: str = "float32", suffix: str = "fp32") -> Definition:
    return Definition.model_validate(
        {
            "name": f"toy_{suffix}",
            "op_type": "toy",
            "tags": ["family:toy"],
            "axes": {"rows": {"type": "var"}, "cols": {"type": "var"}},
            "inputs": {
                "x": {"shape": ["rows", "cols"], "dtype": dtype},
                "factor": {"shape": None, "dtype": "float32"},
            },
            "outputs": {"out": {"shape": ["rows", "cols"], "dtype": dtype}},
            "reference": "def run(x, factor):\n    return x * factor\n",
        }
    )


def inplace_definition() -> Definition:
    """``acc += x`` in place and ``out = 2 * acc``: the output ``acc_out`` aliases ``acc``."""
    return Definition.model_validate(
        {
            "name": "toy_inplace_fp32",
            "op_type": "toy_inplace",
            "axes": {"n": {"type": "var"}},
            "inputs": {
                "x": {"shape": ["n"], "dtype": "float32"},
                "acc": {"shape": ["n"], "dtype": "float32"},
            },
            "outputs": {
                "out": {"shape": ["n"], "dtype": "float32"},
                "acc_out": {"shape": ["n"], "dtype": "float32", "aliases": "acc"},
            },
            "reference": "def run(x, acc):\n    total = acc + x\n    return total * 2, total\n",
        }
    )


def marker(definition: Definition, value: int, dps: bool = True) -> Solution:
    if dps:
        source = f"def run(x, factor, out):\n    out.fill_({value})\n"
    else:
        source = f"import torch\n\n\ndef run(x, factor):\n    return torch.full_like(x, {value})\n"
    return Solution(
        name=f"{definition.name}_m{value}",
        definition=definition.name,
        author="tests",
        spec=BuildSpec(
            language="python",
            target_hardware=["cuda", "cpu"],
            entry_point="marker.py::run",
            destination_passing_style=dps,
        ),
        sources=[SourceFile(path="marker.py", content=source)],
    )


def inplace_solution(definition: Definition) -> Solution:
    source = "def run(x, acc, out):\n    acc.add_(x)\n    out.copy_(acc * 2)\n"
    return Solution(
        name=f"{definition.name}_dps",
        definition=definition.name,
        author="tests",
        spec=BuildSpec(language="python", target_hardware=["cpu"], entry_point="s.py::run"),
        sources=[SourceFile(path="s.py", content=source)],
    )


def workload(definition: Definition, **axes: int) -> Workload:
    inputs: dict[str, Any] = {
        n: ScalarInput(value=1.5) if s.shape is None else RandomInput()
        for n, s in definition.inputs.items()
    }
    identity = f"{definition.name}/{sorted(axes.items())}"
    return Workload(axes=axes, inputs=inputs, uuid=str(uuid.uuid5(uuid.NAMESPACE_URL, identity)))


def timed(
    definition: Definition,
    solution: Solution,
    load: Workload,
    median_us: float,
    spread_us: float = 0.2,
    hardware: str = CPU,
    status: Status = Status.PASSED,
    eager_us: float | None = None,
    copy_gbps: float | None = None,
    host_us: float | None = None,
) -> Trace:
    """A trace of GPU time ``median_us`` (spread ``spread_us``), eager per-call time ``eager_us``
    and host submit time ``host_us``, on ``hardware`` whose copy ceiling was ``copy_gbps``."""
    performance = Performance(
        latency_ms=median_us * 1e-3,
        reference_latency_ms=10 * median_us * 1e-3,
        speedup_factor=10.0,
        latency_p20_ms=(median_us - spread_us / 2) * 1e-3,
        latency_p80_ms=(median_us + spread_us / 2) * 1e-3,
        eager_call_ms=None if eager_us is None else eager_us * 1e-3,
        host_submit_ms=None if host_us is None else host_us * 1e-3,
    )
    ceilings = None if copy_gbps is None else {"copy_gbps": copy_gbps}
    environment = Environment(hardware=hardware, ceilings=ceilings)
    if status is not Status.PASSED:
        return make_trace(definition, solution, load, environment, status, "failed")
    return make_trace(definition, solution, load, environment, status, "", None, performance)


def toy_set(*definitions: Definition, solutions: list[Solution] | None = None) -> TraceSet:
    trace_set = TraceSet(root=None)
    for definition in definitions:
        trace_set.add_definition(definition, persist=False)
    for solution in solutions or []:
        trace_set.add_solution(solution, persist=False)
    return trace_set


def add(trace_set: TraceSet, *traces: Trace) -> None:
    for trace in traces:
        if not any(
            w.uuid == trace.workload.uuid for w in trace_set.workloads_for(trace.definition)
        ):
            trace_set.add_workload(trace.definition, trace.workload, persist=False)
        trace_set.traces.setdefault(trace.definition, []).append(trace)
