"""The engine measured by itself.

1. Wall time per (solution, workload) evaluation, end to end from the command line: 3 rmsnorm solutions x
   8 workloads (batch 1 to 8192, hidden 4096, bf16), run twice (cold: empty build and Triton caches; warm).
   flashinfer-bench 0.1.2 took 0.46 s per evaluation, 11 s in all, for the same work on an H200
   (2026-11-22); the bar is half that.
2. Agreement of the engine's timing with a bare loop: a plain copy solution timed by the engine against
   the copy bandwidth of a bare CUDA-event loop in the same process (bar: within 5%).
Results: benchmarks/results/engine_<device>_<date>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import environment, write_report
from benchmarks.profiles import summarize
from kernelarena.data import (
    AxisVar,
    BuildSpec,
    Definition,
    RandomInput,
    ScalarInput,
    Solution,
    SourceFile,
    TensorSpec,
    TraceSet,
    Workload,
)
from kernelarena.evaluate.executors.benchmark import Benchmark
from kernelarena.evaluate.executors.job_stages import stage_table
from kernelarena.evaluate.judge.worker import describe_startup
from kernelarena.evaluate.options import Options

BATCHES = (1, 8, 32, 128, 512, 1024, 4096, 8192)
# Triton runs under its interpreter on a CPU: the same count of evaluations at sizes it gets through.
CPU_BATCHES = (1, 2, 3, 4, 5, 6, 7, 8)
RMSNORM_SOLUTIONS = ("triton", "cuda", "torch_eager")


def rmsnorm_dataset(root: Path, batches: tuple[int, ...]) -> None:
    """Workloads for the library's rmsnorm_bf16, tagged 'engine' so the run picks exactly these."""
    from kernelarena.library import load_library

    library = load_library()
    definition = library.definitions["rmsnorm_bf16"]
    user = TraceSet(root=root)
    user.definitions[definition.name] = (
        definition  # index only: the definition file stays in the library
    )
    for batch in batches:
        inputs = {name: RandomInput() for name in definition.inputs}
        for name, spec in definition.inputs.items():
            if spec.shape is None:
                inputs[name] = ScalarInput(value=1e-6)
        axes = {
            n: v
            for n, v in {"rows": batch, "batch": batch, "hidden": 4096}.items()
            if n in definition.var_axes
        }
        user.add_workload(
            definition.name,
            Workload(uuid=f"engine-bench-{batch}", axes=axes, inputs=inputs, tags=["engine"]),
        )


def timed_cli(
    dataset: Path, device: str, cache: Path, profile: Path | None = None
) -> tuple[float, dict]:
    """One ``kernelarena run`` of the engine workloads; with ``profile``, the parent under cProfile
    (parent.prof) and the worker too (KERNELARENA_WORKER_PROFILE), both written there."""
    parent_profile = ["-m", "cProfile", "-o", str(profile / "parent.prof")] if profile else []
    command = [
        sys.executable,
        *parent_profile,
        "-m",
        "kernelarena.cli",
        "run",
        "rmsnorm_bf16",
        "--dataset",
        str(dataset),
        "--suite",
        "engine",
        "--device",
        device,
        "--json",
        "--allow-failures",
        "--solutions",
        ",".join(RMSNORM_SOLUTIONS),
    ]
    env = dict(os.environ, KERNELARENA_CACHE=str(cache), TRITON_CACHE_DIR=str(cache / "triton"))
    if profile:
        profile.mkdir(parents=True, exist_ok=True)
        env["KERNELARENA_WORKER_PROFILE"] = str(profile)
    started = time.perf_counter()
    finished = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    if finished.returncode != 0:
        raise RuntimeError(finished.stderr[-3000:])
    payload = json.loads(finished.stdout.strip().splitlines()[-1])
    return wall, payload


def python_bytecode() -> dict:
    """Whether imports here read compiled bytecode: a start-up's largest cost. (The GPU machines'
    image sets PYTHONDONTWRITEBYTECODE and ships torch without .pyc files, so every process
    compiles it again: ~1.5 s more for ``import torch`` than after ``python -m compileall``.)"""
    import importlib.util

    return {
        "dont_write_bytecode": sys.dont_write_bytecode,
        "torch_pyc_present": Path(importlib.util.cache_from_source(torch.__file__)).exists(),
    }


def copy_agreement(device: torch.device, megabytes: int = 1024) -> dict:
    n = megabytes * (1 << 20) // 4
    definition = Definition(
        name="copy_f32",
        op_type="copy",
        axes={"n": AxisVar()},
        inputs={"x": TensorSpec(shape=["n"], dtype="float32")},
        outputs={"out": TensorSpec(shape=["n"], dtype="float32")},
        reference="def run(x):\n    return x.clone()\n",
        bytes_moved="nbytes('x') + nbytes('out')",
    )
    solution = Solution(
        name="copy_f32_torch",
        definition="copy_f32",
        author="bench",
        spec=BuildSpec(
            language="python", target_hardware=["cuda", "cpu"], entry_point="copy.py::run"
        ),
        sources=[SourceFile(path="copy.py", content="def run(x, out):\n    out.copy_(x)\n")],
    )
    trace_set = TraceSet(root=None)
    trace_set.add_definition(definition)
    trace_set.add_solution(solution)
    trace_set.add_workload(
        "copy_f32", Workload(uuid="copy-1g", axes={"n": n}, inputs={"x": RandomInput()})
    )
    engine = Benchmark(
        trace_set,
        devices=[str(device)],
        options=Options(trials=1, max_iterations=50, budget_ms=500),
    )
    trace = engine.run_all()[0]
    assert trace.evaluation is not None and trace.evaluation.performance is not None, (
        trace.evaluation
    )
    engine_gbps = trace.evaluation.performance.achieved_gbps
    source = torch.randn(n, device=device)
    target = torch.empty_like(source)
    for _ in range(5):
        target.copy_(source)
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(50)
    ]
    for start, end in events:
        start.record()
        target.copy_(source)
        end.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in events)
    bare_gbps = 2 * n * 4 / (times[len(times) // 2] * 1e-3) / 1e9
    return {
        "engine_gbps": engine_gbps,
        "bare_loop_gbps": bare_gbps,
        "ratio": engine_gbps / bare_gbps,
        "engine_timing_mode": trace.evaluation.performance.timing_mode,
        "bytes": 2 * n * 4,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--skip-rmsnorm", action="store_true", help="only the copy agreement")
    parser.add_argument("--skip-copy", action="store_true", help="only the command-line runs")
    parser.add_argument(
        "--label", default="", help="suffix of the results file (engine_<device>_<date>_<label>)"
    )
    parser.add_argument(
        "--profile", type=Path, default=None, help="cProfile the warm run's parent and worker here"
    )
    arguments = parser.parse_args()
    device = torch.device(arguments.device)
    report: dict = {
        "benchmark": "engine",
        "environment": environment(device),
        "python_bytecode": python_bytecode(),
        "runs": [],
    }
    work = Path(tempfile.mkdtemp(prefix="kernelarena-engine-bench-"))
    try:
        if not arguments.skip_rmsnorm:
            rmsnorm_dataset(work / "dataset", BATCHES if device.type == "cuda" else CPU_BATCHES)
        cache = work / "cache"
        for label in () if arguments.skip_rmsnorm else ("cold", "warm"):
            shutil.rmtree(work / "dataset" / "traces", ignore_errors=True)
            profile = arguments.profile if label == "warm" else None
            wall, payload = timed_cli(work / "dataset", arguments.device, cache, profile)
            traces = payload["traces"]
            statuses: dict[str, int] = {}
            for trace in traces:
                status = trace["evaluation"]["status"]
                statuses[status] = statuses.get(status, 0) + 1
            evaluations = len(traces) + len(payload["skipped"])
            report["runs"].append(
                {
                    "label": label,
                    "wall_s": wall,
                    "evaluations": evaluations,
                    "per_evaluation_s": wall / max(evaluations, 1),
                    "statuses": statuses,
                    "skipped": payload["skipped"],
                    "worker_startup": [e.get("startup") for e in payload["environments"]],
                    "stages": payload.get("stages", {}),
                }
            )
            print(
                f"{label}: {wall:.2f} s for {evaluations} evaluations ({wall / max(evaluations, 1):.3f} s each); {statuses}"
            )
            for worker in payload["environments"]:
                if worker.get("startup"):
                    print(f"  worker start-up {describe_startup(worker['startup'])}")
            for line in stage_table(payload.get("stages", {}), label):
                print("  " + line)
            if profile is not None:
                summarize(profile)  # a .txt beside each .prof
        if device.type == "cuda" and not arguments.skip_copy:
            report["copy_agreement"] = copy_agreement(device)
            print("copy agreement:", report["copy_agreement"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["flashinfer_bench_reference"] = {
        "per_evaluation_s": 0.46,
        "total_s": 11.0,
        "device": "NVIDIA H200",
        "date": "2026-11-22",
    }
    print("wrote", write_report("engine", report, arguments.label))


if __name__ == "__main__":
    main()
