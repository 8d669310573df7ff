"""Bad solutions get the right status, with a log saying why, and the good ones in the same run pass."""

from __future__ import annotations

import pytest

from kernelarena.data import Status
from kernelarena.evaluate.executors.benchmark import Benchmark
from kernelarena.evaluate.executors.jobs import Timeouts
from kernelarena.evaluate.options import Options
from tests.evaluate.bad_solutions import CPU_CASES, GPU_CASES, trace_set


def _run(cases: dict[str, tuple[Status, bool, str]], devices: str) -> dict[str, object]:
    benchmark = Benchmark(
        trace_set(cases),
        devices=devices,
        options=Options(trials=2, budget_ms=20, max_iterations=20),
        timeouts=Timeouts(build_s=120, run_s=8, startup_s=300),
    )
    traces = benchmark.run_all()
    return {t.solution: t for t in traces}


def _check(cases: dict[str, tuple[Status, bool, str]], by_solution: dict[str, object]) -> None:
    for stem, (status, _, phrase) in cases.items():
        trace = by_solution[f"vector_scale_{stem}"]
        evaluation = trace.evaluation  # type: ignore[attr-defined]
        assert evaluation.status is status, (
            f"{stem}: {evaluation.status} (expected {status}); log:\n{evaluation.log}"
        )
        assert phrase in evaluation.log, f"{stem}: log lacks {phrase!r}:\n{evaluation.log}"
    first = by_solution["vector_scale_good_first"].evaluation  # type: ignore[attr-defined]
    assert first.status is Status.PASSED
    assert first.performance.latency_ms > 0 and first.performance.sample_count >= 3
    # The host's submit time of a call, from the sandbox, never above the judge's eager time.
    assert 0 < first.performance.host_submit_ms <= first.performance.eager_call_ms


@pytest.mark.timeout(300)
def test_bad_solutions_are_contained_on_cpu() -> None:
    _check(CPU_CASES, _run(CPU_CASES, "cpu"))


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_bad_solutions_are_contained_on_gpu() -> None:
    _check(GPU_CASES, _run(GPU_CASES, "cuda:0"))
