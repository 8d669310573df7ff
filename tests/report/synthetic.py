"""Traces made by hand for the report's tests: known figures on two hardware models, a definition
whose every trace failed, and a model run file."""

from __future__ import annotations

import json
from pathlib import Path

from kernelarena.data import (
    AxisVar,
    BuildSpec,
    Definition,
    Environment,
    Performance,
    RandomInput,
    Solution,
    SourceFile,
    Status,
    TensorSpec,
    Trace,
    TraceSet,
    Workload,
)
from kernelarena.evaluate.options import make_trace

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


def definition(name: str) -> Definition:
    return Definition(
        name=name,
        op_type="toy",
        axes={"rows": AxisVar(), "hidden": AxisVar()},
        inputs={"x": TensorSpec(shape=["rows", "hidden"], dtype="float32")},
        outputs={"out": TensorSpec(shape=["rows", "hidden"], dtype="float32")},
        reference="def run(x):\n    return x * 2\n",
        bytes_moved="nbytes('x') + nbytes('out')",
    )


def solution(definition_name: str, suffix: str, language: str) -> Solution:
    return Solution(
        name=f"{definition_name}_{suffix}",
        definition=definition_name,
        author=f"author-{suffix}",
        spec=BuildSpec(language=language, target_hardware=["cuda"], entry_point="kernel.py::run"),
        sources=[SourceFile(path="kernel.py", content="def run(x):\n    return x * 2\n")],
    )


def workload(rows: int, hidden: int) -> Workload:
    return Workload(
        uuid=f"r{rows}-h{hidden}",
        axes={"rows": rows, "hidden": hidden},
        inputs={"x": RandomInput()},
    )


def environment(hardware: str) -> Environment:
    return Environment(
        hardware=hardware,
        libs={"torch": "2.11.0", "triton": "3.6.0"},
        device="cuda:0",
        ceilings={"copy_gbps": 3000.0, "matmul_tflops": 800.0},
    )


def timed(
    made: Definition,
    solved: Solution,
    shape: Workload,
    hardware: str,
    latency_us: float,
    spread: float = 0.02,
    stamp: str = "2026-11-20T00:00:00+00:00",
) -> Trace:
    moved = 2 * 4 * shape.axes["rows"] * shape.axes["hidden"]
    performance = Performance(
        latency_ms=latency_us / 1e3,
        reference_latency_ms=0.1,  # 100 us for every workload
        speedup_factor=100.0 / latency_us,
        latency_p20_ms=latency_us * (1 - spread) / 1e3,
        latency_p80_ms=latency_us * (1 + spread) / 1e3,
        bytes_moved=moved,
        achieved_gbps=moved / (latency_us * 1e-6) / 1e9,
        ceiling_fraction=moved / (latency_us * 1e-6) / 1e9 / 3000.0,
    )
    trace = make_trace(
        made, solved, shape, environment(hardware), Status.PASSED, "", performance=performance
    )
    return _stamped(trace, stamp)


def failed(
    made: Definition,
    solved: Solution,
    shape: Workload,
    hardware: str,
    status: Status,
    log: str,
    stamp: str = "2026-11-20T00:00:00+00:00",
) -> Trace:
    trace = make_trace(made, solved, shape, environment(hardware), status, log)
    return _stamped(trace, stamp)


def _stamped(trace: Trace, stamp: str) -> Trace:
    assert trace.evaluation is not None
    evaluation = trace.evaluation.model_copy(update={"timestamp": stamp})
    return trace.model_copy(update={"evaluation": evaluation})


def toy_trace_set() -> TraceSet:
    """``toy_norm``: a Triton kernel (fast), a CUDA kernel (fastest at the largest shape), a torch
    peer (slow), timed on three shapes on an H100 and an H200, plus one failure; ``toy_broken``:
    two solutions that only ever failed."""
    made = TraceSet(root=None)
    norm, broken = definition("toy_norm"), definition("toy_broken")
    for each in (norm, broken):
        made.add_definition(each, persist=False)
    triton = solution("toy_norm", "triton", "triton")
    cuda = solution("toy_norm", "cuda", "cuda")
    torch = solution("toy_norm", "torch", "python")
    for solved in (triton, cuda, torch):
        made.add_solution(solved, persist=False)
    shapes = [workload(128, 4096), workload(4096, 4096), workload(32768, 4096)]
    for shape in shapes:
        made.add_workload("toy_norm", shape, persist=False)
    traces = made.traces.setdefault("toy_norm", [])
    for hardware, scale in ((H100, 1.0), (H200, 0.8)):
        for shape, (t, c, p) in zip(shapes, [(5, 6, 10), (40, 42, 80), (300, 250, 600)]):
            traces.append(timed(norm, triton, shape, hardware, t * scale))
            traces.append(timed(norm, cuda, shape, hardware, c * scale))
            traces.append(timed(norm, torch, shape, hardware, p * scale))
    # An older failure of the Triton kernel on the H100, replaced by the pass above.
    traces.append(
        failed(norm, triton, shapes[0], H100, Status.RUNTIME_ERROR, "old", "2026-11-01T00:00:00Z")
    )
    bad_a = solution("toy_broken", "triton", "triton")
    bad_b = solution("toy_broken", "torch", "python")
    for solved in (bad_a, bad_b):
        made.add_solution(solved, persist=False)
    made.add_workload("toy_broken", shapes[0], persist=False)
    log = "Traceback (most recent call last):\n  File kernel.py\nValueError: <b>not</b> a kernel"
    made.traces["toy_broken"] = [
        failed(broken, bad_a, shapes[0], H100, Status.COMPILE_ERROR, log),
        failed(broken, bad_b, shapes[0], H200, Status.RUNTIME_ERROR, "RuntimeError: boom"),
    ]
    return made


def model_run_file(path: Path) -> Path:
    payload = {
        "benchmark": "llama_apply",
        "environment": {"device": H100, "date": "2026-11-24", "torch": "2.11.0"},
        "model": {"name": "LlamaForCausalLM", "hidden_size": 64, "layers": 2},
        "tokens_per_forward": 4096,
        "timings": {
            "apply off": {"median_ms": 10.0, "p20_ms": 9.8, "p80_ms": 10.3},
            "apply on": {"median_ms": 8.0, "p20_ms": 7.9, "p80_ms": 8.2},
        },
        "max_abs_logit_difference": 0.01,
        "choices": [
            {
                "definition": "toy_norm",
                "axes": {"rows": 4096, "hidden": 4096},
                "solution": "toy_norm_triton",
                "reason": "measured",
                "calls_per_forward": 5,
            },
            {
                "definition": "toy_other",
                "axes": {"rows": 1},
                "solution": None,
                "reason": "fallback",
            },
        ],
    }
    path.write_text(json.dumps(payload))
    return path
