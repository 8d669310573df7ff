"""The Ray executor on a local CPU-only Ray cluster whose nodes declare fake GPU resources.

It must give the same traces, statuses and checks as the local executor, and a Ray actor killed
mid-run (from inside, by the solution it evaluates, or from outside, by SIGKILL) must cost only its
job in flight: the job is retried on another actor and every job is reported exactly once.
"""

from __future__ import annotations

import math
import os
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from kernelarena.data import (
    SafetensorsInput,
    ScalarInput,
    Status,
    Trace,
    TraceSet,
    Workload,
)
from kernelarena.evaluate.executors.jobs import Job, JobResult, Timeouts
from kernelarena.evaluate.executors.local import LocalExecutor
from kernelarena.evaluate.executors.ray_actor import RAY_MISSING, import_ray
from kernelarena.evaluate.executors.ray_executor import RayExecutor
from kernelarena.evaluate.executors.ray_placement import actors_that_fit
from kernelarena.evaluate.executors.runner import Executor, plan, run_jobs
from kernelarena.evaluate.options import Options
from tests.evaluate.bad_solutions import CPU_CASES, DEFINITION, solution, trace_set
from tests.evaluate.test_build_pool import BAD, GOOD, UNDEFINED, needs_nvcc

OPTIONS = Options(trials=2, budget_ms=20, max_iterations=20)
TIMEOUTS = Timeouts(build_s=120, run_s=6, startup_s=300)
KILL_MARKER_VARIABLE = "KERNELARENA_TEST_KILL_MARKER"


# -- without a cluster ----------------------------------------------------------------------------


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # makes ``import ray`` raise ImportError
    with pytest.raises(ImportError, match=r"kernelarena\[ray\]") as raised:
        import_ray()
    assert str(raised.value) == RAY_MISSING


def test_actors_fit_by_resources_gpu_model_and_labels() -> None:
    h100 = {
        "Alive": True,
        "Resources": {"CPU": 32.0, "GPU": 8.0, "accelerator_type:H100": 1.0},
        "Labels": {"ray.io/accelerator-type": "H100", "pool": "bench"},
    }
    h200 = {
        "Alive": True,
        "Resources": {"CPU": 8.0, "GPU": 4.0, "accelerator_type:H200": 1.0},
        "Labels": {"ray.io/accelerator-type": "H200", "pool": "ci"},
    }
    dead = {**h100, "Alive": False}
    nodes = [h100, h200, dead]
    one_gpu = {"CPU": 1.0, "GPU": 1.0}
    assert actors_that_fit(nodes, one_gpu, {}) == 12
    assert actors_that_fit(nodes, {**one_gpu, "accelerator_type:H200": 0.001}, {}) == 4
    assert actors_that_fit(nodes, {"CPU": 4.0, "GPU": 1.0}, {}) == 8 + 2  # CPUs bind on the H200
    assert actors_that_fit(nodes, one_gpu, {"ray.io/accelerator-type": "H100"}) == 8
    assert actors_that_fit(nodes, one_gpu, {"pool": "!bench"}) == 4
    assert actors_that_fit(nodes, one_gpu, {"pool": "in(bench,ci)"}) == 12
    assert actors_that_fit(nodes, {**one_gpu, "B200": 1.0}, {}) == 0


# -- on a local Ray cluster -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def kill_marker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ray") / "actor-killed-once"


@pytest.fixture(scope="module")
def ray_cluster(kill_marker: Path) -> Iterator[None]:
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'kernelarena[ray]'")
    # Ray's processes inherit this process's environment, and the actors' workers theirs.
    os.environ[KILL_MARKER_VARIABLE] = str(kill_marker)
    # Solutions here kill their Ray actor to stand for a lost node, which a confined sandbox
    # cannot do (Landlock scopes its signals): these tests opt out of the confinement.
    os.environ["KERNELARENA_UNCONFINED"] = "1"
    # address="local": a cluster of our own even where $RAY_ADDRESS points elsewhere. Two CPU slots,
    # each with a fake GPU that the actors ask for, as they would ask for a GPU model's resource.
    ray.init(
        address="local",
        num_cpus=2,
        resources={"GPU_fake": 2},
        include_dashboard=False,
        log_to_driver=False,
    )
    yield
    ray.shutdown()
    os.environ.pop(KILL_MARKER_VARIABLE, None)
    os.environ.pop("KERNELARENA_UNCONFINED", None)


@pytest.fixture(scope="module")
def executor(ray_cluster: None) -> Iterator[RayExecutor]:
    """One executor for the module: starting its actors is the slow part, and reuse is a case too."""
    made = RayExecutor(
        timeouts=TIMEOUTS, device="cpu", resources={"GPU_fake": 1}, measure_ceilings=False
    )
    environments = made.start()
    assert len(environments) == 2, environments
    yield made
    made.close()


# Errors that are not a function of the job: caches_output returns whatever it cached for an input
# address, and which earlier input the allocator placed at that address varies from run to run.
ADDRESS_DEPENDENT_ERRORS = {"vector_scale_caches_output"}


def _checks(trace: Trace) -> tuple[str, str, str]:
    """Status and correctness, with NaN comparable."""
    assert trace.evaluation is not None
    correctness = trace.evaluation.correctness
    if correctness is None or trace.solution in ADDRESS_DEPENDENT_ERRORS:
        return (trace.evaluation.status.value, "", "")
    return (
        trace.evaluation.status.value,
        _number(correctness.max_absolute_error),
        _number(correctness.max_relative_error),
    )


def _number(value: float) -> str:
    return "nan" if math.isnan(value) else repr(value)


def _by_key(traces: list[Trace]) -> dict[tuple[str, str, str], Trace]:
    keys = Counter((t.definition, t.solution or "", t.workload.uuid) for t in traces)
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]
    return {(t.definition, t.solution or "", t.workload.uuid): t for t in traces}


def _run_counting(
    jobs: list[Job], executor: Executor, output: TraceSet | None = None
) -> list[Trace]:
    """Run through ``run_jobs`` and check the progress display sees each job exactly once."""
    seen: list[tuple[str, str, str]] = []
    summary = run_jobs(jobs, executor, output, on_progress=lambda job, _: seen.append(job.key))
    assert sorted(seen) == sorted(j.key for j in jobs)
    assert not summary.skipped
    return summary.traces


@pytest.mark.timeout(300)
def test_ray_and_local_executors_give_the_same_traces(executor: RayExecutor) -> None:
    made = trace_set(CPU_CASES)
    jobs = plan(made, options=OPTIONS)
    on_ray = _by_key(_run_counting(jobs, executor))
    local = LocalExecutor(["cpu", "cpu"], TIMEOUTS, measure_ceilings=False)  # two, like the actors
    try:
        on_local = _by_key(_run_counting(plan(made, options=OPTIONS), local))
    finally:
        local.close()

    assert set(on_ray) == set(on_local) == {j.key for j in jobs}
    differing = {k: (_checks(on_ray[k]), _checks(on_local[k])) for k in on_ray}
    differing = {k: pair for k, pair in differing.items() if pair[0] != pair[1]}
    logs = {  # what each executor's judge said, for a failure's message
        k: [(t.evaluation.log or "")[-400:] for t in (on_ray[k], on_local[k]) if t.evaluation]
        for k in differing
    }
    assert not differing, (differing, logs)
    for stem, (status, _, phrase) in CPU_CASES.items():
        evaluation = on_ray[(DEFINITION.name, f"vector_scale_{stem}", "n1000")].evaluation
        assert evaluation is not None
        assert evaluation.status is status, f"{stem}: {evaluation.status}\n{evaluation.log}"
        assert phrase in evaluation.log, f"{stem}: log lacks {phrase!r}:\n{evaluation.log}"
    hardware = {t.evaluation.environment.hardware for t in on_ray.values() if t.evaluation}
    assert hardware == {
        t.evaluation.environment.hardware for t in on_local.values() if t.evaluation
    }


@pytest.mark.timeout(300)
def test_an_actor_killed_by_its_solution_costs_only_that_job(
    executor: RayExecutor, kill_marker: Path, tmp_path: Path
) -> None:
    made = trace_set({}, sizes=(100, 200, 300, 400))
    made.add_solution(solution("kills_ray_actor", True))
    jobs = plan(made, options=OPTIONS)
    output = TraceSet(root=tmp_path / "dataset")
    traces = _by_key(_run_counting(jobs, executor, output))

    assert kill_marker.exists(), "the solution never killed its actor"
    assert set(traces) == {j.key for j in jobs}
    failed = {k: t.evaluation.log for k, t in traces.items() if not t.passed and t.evaluation}
    assert not failed, failed  # the killed job passed on its retry, on another actor
    written = TraceSet.load(tmp_path / "dataset").traces[DEFINITION.name]
    assert set(_by_key(written)) == set(traces)  # appended once each, as they came


@pytest.mark.timeout(300)
def test_an_actor_killed_from_outside_costs_only_its_job_in_flight(executor: RayExecutor) -> None:
    made = trace_set({}, sizes=(100, 200, 300, 400))
    made.add_solution(solution("slow_good", True))
    jobs = plan(made, options=OPTIONS)
    seen: list[tuple[str, str, str]] = []
    killed: list[int] = []

    def kill_an_actor_after_the_second_result(job: Job, result: JobResult | None) -> None:
        seen.append(job.key)
        if len(seen) == 2:
            killed.append(_kill_an_evaluation_actor())

    summary = run_jobs(jobs, executor, None, on_progress=kill_an_actor_after_the_second_result)
    assert killed, "no result came back, so nothing was killed"
    assert sorted(seen) == sorted(j.key for j in jobs)
    traces = _by_key(summary.traces)
    assert set(traces) == {j.key for j in jobs}
    failed = {
        k: (t.evaluation.status, t.evaluation.log)
        for k, t in traces.items()
        if not t.passed and t.evaluation
    }
    assert not failed, failed


def _kill_an_evaluation_actor() -> int:
    """SIGKILL one of this test's evaluation actors, a busy one if there is one; return its pid."""
    actors: list[tuple[bool, int]] = []
    for process in psutil.Process().children(recursive=True):  # our cluster's, not another's
        try:
            title = process.cmdline()
        except psutil.Error:
            continue
        if title and title[0].startswith("ray::EvaluationHost"):
            actors.append((title[0] != "ray::EvaluationHost.evaluate", process.pid))
    assert actors, "no evaluation actor process found"
    _, pid = min(actors)
    os.kill(pid, signal.SIGKILL)
    return pid


@pytest.mark.timeout(120)
def test_safetensors_inputs_travel_with_the_job(executor: RayExecutor, tmp_path: Path) -> None:
    """The blob goes through the object store: jobs sent after the dataset folder is gone pass."""
    import torch
    from safetensors.torch import save_file

    root = tmp_path / "dataset"
    (root / "blob").mkdir(parents=True)
    save_file({"x": torch.linspace(-3, 3, 257)}, str(root / "blob" / "x.safetensors"))
    made = TraceSet(root=root)
    made.add_definition(DEFINITION, persist=False)
    made.add_solution(solution("good", True), persist=False)
    for index in range(4):
        made.add_workload(
            DEFINITION.name,
            Workload(
                uuid=f"from_blob_{index}",
                axes={"n": 257},
                inputs={
                    "x": SafetensorsInput(path="blob/x.safetensors", tensor_key="x"),
                    "factor": ScalarInput(value=1.5 + index),
                },
            ),
            persist=False,
        )
    jobs = plan(made, options=OPTIONS)
    assert len(jobs) == 4 and all(j.blob_root == root for j in jobs)

    def move_the_dataset_away(job: Job, result: JobResult | None) -> None:
        if root.exists():
            root.rename(tmp_path / "moved")

    # Two actors: two jobs go out at once, the other two only after the folder has moved.
    summary = run_jobs(jobs, executor, None, on_progress=move_the_dataset_away)
    assert not root.exists()
    assert len(summary.traces) == 4
    for trace in summary.traces:
        assert trace.evaluation is not None
        assert trace.evaluation.status is Status.PASSED, trace.evaluation.log


@pytest.mark.timeout(180)
def test_a_job_that_kills_every_actor_fails_after_its_retries(executor: RayExecutor) -> None:
    made = trace_set({}, sizes=(100,))
    made.add_solution(solution("kills_ray_actor_always", True))
    jobs = [j for j in plan(made, options=OPTIONS) if "always" in j.solution.name]
    retries = executor.max_retries
    executor.max_retries = 1
    try:
        (trace,) = _run_counting(jobs, executor)
    finally:
        executor.max_retries = retries
    assert trace.evaluation is not None
    assert trace.evaluation.status is Status.RUNTIME_ERROR
    assert "lost 2 times" in trace.evaluation.log, trace.evaluation.log


@needs_nvcc
@pytest.mark.timeout(600)
def test_compiled_solutions_are_built_ahead_in_the_actors_pools(executor: RayExecutor) -> None:
    """Each actor's pool builds the run's CUDA solutions before their jobs (here for sm_90a on
    a CPU): a build's failure is the job's verdict without a judge (no stages), and the good
    one is compiled, then not run."""
    made = trace_set({}, sizes=(100, 200))
    good, bad = GOOD[0], BAD
    for compiled in (good, bad):
        made.add_solution(compiled)
    jobs = [j for j in plan(made, options=OPTIONS) if j.solution.name in (good.name, bad.name)]
    stages: dict[str, list[dict[str, float]]] = {}

    def record(job: Job, result: JobResult | None) -> None:
        assert result is not None
        stages.setdefault(job.solution.name, []).append(result.stages)

    summary = run_jobs(jobs, executor, None, on_progress=record)
    failed = [t for t in summary.traces if t.solution == bad.name]
    assert len(failed) == 2
    for trace in failed:
        assert trace.evaluation is not None
        assert trace.evaluation.status is Status.COMPILE_ERROR
        assert UNDEFINED in trace.evaluation.log, trace.evaluation.log
    assert stages[bad.name] == [{}, {}]  # the pool's verdict: no judge evaluated them
    assert [why for job, why in summary.skipped] == [
        "compiled for sm_90a; not run: no GPU here"
    ] * 2
    assert summary.builds["pools"] == 2
    assert {"built", "failed"} <= set(summary.builds["by_status"])
