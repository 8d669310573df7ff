"""Our definitions in the shapes of the published FlashInfer-Trace ones (paged decode, ragged prefill,
cu_seqlens recurrence, sparse attention; tests/data/fib_shapes.py), end to end through the engine and
``kernelarena run``: inputs generated to meet their constraints, every solution checked against the
reference within the definition's tolerances. On a CPU-only torch the ``binding: torch`` CUDA
solutions are skipped, writing no trace; on a GPU they build and pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelarena.cli import app
from kernelarena.data import Status, Trace, TraceSet
from kernelarena.evaluate.executors.benchmark import Benchmark
from kernelarena.evaluate.executors.jobs import Timeouts
from kernelarena.evaluate.options import Options
from tests.conftest import HAS_CUDA
from tests.data import fib_shapes

FAST = Options(trials=2, budget_ms=20, max_iterations=20)
# On the CPU these tests check correctness only: timings of a shared 2-core machine say nothing, and
# the timing's cross-checks would judge the machine's load rather than the solutions.
CHECK_ONLY = Options(trials=3, timing=False)


def _statuses(traces: list[Trace]) -> dict[tuple[str, str], Status]:
    statuses = {}
    for trace in traces:
        assert trace.solution is not None and trace.evaluation is not None
        statuses[(trace.solution, trace.workload.uuid)] = trace.evaluation.status
    return statuses


def _logs(traces: list[Trace]) -> str:
    return "\n".join(
        f"{t.solution} {t.workload.uuid}: {t.evaluation.log[-2000:]}"
        for t in traces
        if t.evaluation is not None and t.evaluation.status is not Status.PASSED
    )


@pytest.mark.skipif(HAS_CUDA, reason="the CPU run; test_fib_shapes_pass_on_the_gpu covers GPUs")
@pytest.mark.timeout(900)
def test_fib_shapes_run_on_cpu_with_cuda_solutions_skipped(tmp_path: Path) -> None:
    dataset = fib_shapes.trace_set(tmp_path / "data")
    benchmark = Benchmark(dataset, devices="cpu", options=CHECK_ONLY, timeouts=Timeouts(run_s=300))
    traces = benchmark.run_all(suite="smoke")
    expected = {
        (fib_shapes.python_solution(name).name, workload.uuid)
        for name in fib_shapes.NAMES
        for workload in fib_shapes.workloads(name)
        if "smoke" in (workload.tags or [])
    }
    assert benchmark.summary is not None
    assert _statuses(traces) == dict.fromkeys(expected, Status.PASSED), (
        _logs(traces),
        [(job.solution.name, job.workload.uuid, why) for job, why in benchmark.summary.skipped],
    )
    skipped = {(job.solution.name, reason) for job, reason in benchmark.summary.skipped}
    assert {name for name, _ in skipped} == {
        fib_shapes.cuda_solution(n).name for n in fib_shapes.NAMES
    }
    assert all("needs a CUDA build of torch" in reason for _, reason in skipped), skipped
    # The traces are on disk, and the solutions errors are within the definitions' tolerances.
    reloaded = TraceSet.load(tmp_path / "data", strict=True)
    assert sum(len(t) for t in reloaded.traces.values()) == len(expected)
    for trace in traces:
        assert trace.evaluation is not None and trace.evaluation.correctness is not None
        assert trace.evaluation.correctness.max_absolute_error <= 0.02


@pytest.mark.gpu
@pytest.mark.timeout(1800)
def test_fib_shapes_pass_on_the_gpu(tmp_path: Path) -> None:
    dataset = fib_shapes.trace_set(tmp_path / "data")
    benchmark = Benchmark(dataset, devices="cuda:0", options=FAST)
    traces = benchmark.run_all(suite="all")
    expected = {
        (solution.name, workload.uuid)
        for name in fib_shapes.NAMES
        for solution in (fib_shapes.python_solution(name), fib_shapes.cuda_solution(name))
        for workload in fib_shapes.workloads(name)
    }
    assert _statuses(traces) == dict.fromkeys(expected, Status.PASSED), _logs(traces)
    assert benchmark.summary is not None and benchmark.summary.skipped == []


def _run_paged_decode(root: Path, device: str, suite: str, *options: str) -> dict[str, object]:
    fib_shapes.trace_set(root, names=(fib_shapes.PAGED_DECODE,))
    arguments = ["run", fib_shapes.PAGED_DECODE, "--dataset", str(root), "--device", device]
    arguments += ["--suite", suite, "--trials", "2", "--json", *options]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.stdout.splitlines() if line.startswith('{"environments"')]
    report: dict[str, object] = json.loads(line)
    return report


@pytest.mark.skipif(HAS_CUDA, reason="the CPU run; the gpu test runs the command on a GPU")
@pytest.mark.timeout(900)
def test_kernelarena_run_paged_decode_on_cpu(tmp_path: Path) -> None:
    report = _run_paged_decode(tmp_path / "data", "cpu", "smoke", "--no-timing")
    traces = [Trace.model_validate(t) for t in report["traces"]]  # type: ignore[attr-defined]
    smoke = [w for w in fib_shapes.workloads(fib_shapes.PAGED_DECODE) if "smoke" in (w.tags or [])]
    assert len(traces) == len(smoke) and all(t.passed for t in traces), _logs(traces)
    for trace in traces:  # checked against the reference, which ran on the same inputs
        assert trace.evaluation is not None and trace.evaluation.correctness is not None
        assert trace.evaluation.correctness.max_absolute_error <= 0.02
    reasons = [s["reason"] for s in report["skipped"]]  # type: ignore[attr-defined]
    assert len(reasons) == len(smoke) and all("needs a CUDA build of torch" in r for r in reasons)


@pytest.mark.gpu
@pytest.mark.timeout(1800)
def test_kernelarena_run_paged_decode_on_the_gpu(tmp_path: Path) -> None:
    report = _run_paged_decode(tmp_path / "data", "cuda:0", "all")
    traces = [Trace.model_validate(t) for t in report["traces"]]  # type: ignore[attr-defined]
    for trace in traces:  # timed, with the reference timed beside it for the speedup
        assert trace.evaluation is not None and trace.evaluation.performance is not None
        assert (trace.evaluation.performance.reference_latency_ms or 0) > 0
    solutions = {t.solution for t in traces}
    assert solutions == {
        fib_shapes.python_solution(fib_shapes.PAGED_DECODE).name,
        fib_shapes.cuda_solution(fib_shapes.PAGED_DECODE).name,
    }
    every = fib_shapes.workloads(fib_shapes.PAGED_DECODE)
    assert len(traces) == 2 * len(every) and all(t.passed for t in traces), _logs(traces)
    assert report["skipped"] == []
