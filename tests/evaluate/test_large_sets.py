"""Sets larger than an arena chunk, through the engine with timing on: the published rmsnorm_h128
shapes at batch 65536 (a set of 32 MiB, twice a CPU chunk) once failed honest solutions with
"input 'hidden_states' was modified by the solution" (issue 37), because two such sets shared
memory; ``--no-timing`` (one set at a time) passed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernelarena.data import (
    BuildSpec,
    Definition,
    RandomInput,
    ScalarInput,
    Solution,
    SourceFile,
    Status,
    Trace,
    TraceSet,
    Workload,
)
from kernelarena.evaluate.executors.benchmark import Benchmark
from kernelarena.evaluate.executors.jobs import Timeouts
from kernelarena.evaluate.options import Options
from tests.data.peer_dataset import DEFINITION

HONEST = """import torch


def run(hidden_states, weight, eps, output):
    x = hidden_states.to(torch.float32)
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    output.copy_((x * rstd * weight.to(torch.float32)).to(hidden_states.dtype))
"""


def _dataset(root: Path, target: str, batches: tuple[int, ...]) -> TraceSet:
    definition = Definition.model_validate(DEFINITION)
    dataset = TraceSet(root=root)
    dataset.add_definition(definition)
    dataset.add_solution(
        Solution(
            name="rmsnorm_h128_honest",
            definition=definition.name,
            author="tests",
            spec=BuildSpec(language="python", target_hardware=[target], entry_point="s.py::run"),
            sources=[SourceFile(path="s.py", content=HONEST)],
        )
    )
    for batch in batches:
        dataset.add_workload(
            definition.name,
            Workload(
                axes={"batch_size": batch},
                inputs={
                    "hidden_states": RandomInput(),
                    "weight": RandomInput(),
                    "eps": ScalarInput(value=1e-6),
                },
                uuid=f"batch-{batch}",
            ),
        )
    return dataset


def _check_all_passed(traces: list[Trace], count: int) -> None:
    assert len(traces) == count
    for trace in traces:
        evaluation = trace.evaluation
        assert evaluation is not None
        assert "was modified" not in evaluation.log, evaluation.log
        assert evaluation.status is Status.PASSED, (trace.workload.uuid, evaluation.log)


@pytest.mark.timeout(600)
def run_on_cpu(dataset: TraceSet) -> list[Trace]:
    """Every job of ``dataset`` on the CPU, checked and timed, with short timings."""
    return Benchmark(
        dataset,
        devices="cpu",
        options=Options(trials=2, budget_ms=20, max_iterations=10, min_iterations=3),
        timeouts=Timeouts(build_s=120, run_s=300, startup_s=300),
    ).run_all()


def test_an_honest_rmsnorm_passes_on_sets_larger_than_a_chunk(tmp_path: Path) -> None:
    _check_all_passed(run_on_cpu(_dataset(tmp_path, "cpu", (32768, 65536))), 2)


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_an_honest_rmsnorm_passes_on_gpu_sets_larger_than_a_chunk(tmp_path: Path) -> None:
    """Sets of 1 GiB (2M rows): CUDA buffers of their own, freed with the set, timed as graphs."""
    dataset = _dataset(tmp_path, "gpu", (32768, 65536, 1 << 21))
    traces = Benchmark(
        dataset, devices="cuda:0", options=Options(trials=2, budget_ms=50, max_iterations=20)
    ).run_all()
    _check_all_passed(traces, 3)


def test_the_judge_running_out_of_memory_for_a_workloads_sets_is_a_skip_not_a_verdict() -> None:
    """The judge's own allocations (the arena's buffers, a set's draw) failing for lack of device
    memory say the workload is too large for this device, nothing of the solution: skipped, with
    the reason, never a RUNTIME_ERROR trace."""
    from types import SimpleNamespace

    import torch

    from kernelarena.data import Workload
    from kernelarena.evaluate.judge.evaluator import Evaluator
    from kernelarena.evaluate.judge.outcomes import JUDGE_OUT_OF_MEMORY
    from kernelarena.evaluate.options import Options

    def make(*arguments: object, **keywords: object) -> None:
        raise torch.OutOfMemoryError("cuMemCreate: CUDA out of memory (CUDA_ERROR_OUT_OF_MEMORY)")

    forgotten = []
    workload = Workload(uuid="w", axes={}, inputs={})
    sets = SimpleNamespace(
        job=SimpleNamespace(options=Options(trials=2), workload=workload),
        make=make,
        capture_failed=False,
        forget_all=lambda: forgotten.append(True),
    )
    evaluator = Evaluator.__new__(Evaluator)
    evaluator.device = torch.device("cpu")
    evaluator.arena = SimpleNamespace(mark=lambda: (0, 0), rewind=lambda mark: None)
    outcome = evaluator._judged(sets, SimpleNamespace(options=Options()))  # type: ignore[arg-type]
    assert outcome.trace is None
    assert outcome.skipped is not None and outcome.skipped.startswith(JUDGE_OUT_OF_MEMORY)
    assert "cuMemCreate" in outcome.skipped
    assert forgotten == [True]  # the job's sets still go


def test_once_sets_are_forgotten_a_large_cache_of_freed_memory_goes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The GPU's other processes cannot take memory from one's cache: past 4 GiB freed and kept,
    the judge's (after a job) and the sandbox's (once it forgets sets) go back to the device; less
    stays for the next job."""
    import torch

    from kernelarena.evaluate.sandbox import arena

    emptied: list[bool] = []
    held = {"reserved": 10 << 30, "allocated": 1 << 30}
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: held["reserved"])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: held["allocated"])
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    arena.give_back_cached(torch.device("cuda:0"))
    assert emptied == [True]
    held["reserved"] = 3 << 30
    arena.give_back_cached(torch.device("cuda:0"))
    arena.give_back_cached(torch.device("cpu"))
    assert emptied == [True]


def _evaluator_with_outcomes(outcomes: list[Any], calls: list[str]) -> Any:
    """An ``Evaluator`` whose attempts at a job give ``outcomes`` in turn, recording in ``calls``
    what it gives back between them."""
    from types import SimpleNamespace

    import torch

    from kernelarena.evaluate.judge.evaluator import Evaluator

    evaluator = Evaluator.__new__(Evaluator)
    evaluator.device = torch.device("cpu")
    evaluator._capture_failed = False
    evaluator._too_large = set()
    evaluator.references = SimpleNamespace(close=lambda: calls.append("references closed"))
    evaluator.sandboxes = SimpleNamespace(retire=lambda: calls.append("sandbox retired"))

    def attempt(job: object, notify: object) -> Any:
        calls.append("attempt")
        return outcomes.pop(0)

    evaluator._in_sandbox = attempt
    return evaluator


def _job(workload: str = "w") -> Any:
    from types import SimpleNamespace

    from kernelarena.evaluate.options import Options

    solution = SimpleNamespace(runs_on=lambda device: True)
    return SimpleNamespace(
        solution=solution,
        options=Options(),
        definition=SimpleNamespace(content_hash=lambda: "d"),
        workload=SimpleNamespace(content_hash=lambda: workload),
    )


def _traced(status: Any, log: str) -> Any:
    from types import SimpleNamespace

    from kernelarena.evaluate.judge.outcomes import Outcome

    return Outcome(trace=SimpleNamespace(evaluation=SimpleNamespace(status=status, log=log)))


def test_a_job_short_of_device_memory_runs_once_more_with_the_judges_memory_given_back() -> None:
    """The judge's, the reference's and the solution's processes share the device, and what one
    keeps cached the others cannot use: before a job is skipped as too large for the device (or
    failed for the solution's own shortage), everything the judge holds there goes back and the
    job runs again; the trace says so."""
    from kernelarena.data import Status
    from kernelarena.evaluate.judge.outcomes import JUDGE_OUT_OF_MEMORY, Outcome

    calls: list[str] = []
    skipped = Outcome(skipped=f"{JUDGE_OUT_OF_MEMORY}: the reference's sandbox: 3.73 GiB")
    evaluator = _evaluator_with_outcomes([skipped, _traced(Status.PASSED, "timed")], calls)
    outcome = evaluator.evaluate(_job())
    assert calls == ["attempt", "references closed", "sandbox retired", "attempt"]
    log = outcome.trace.evaluation.log
    assert log.startswith("a first attempt ran out of device memory") and "3.73 GiB" in log
    assert log.endswith("timed")

    # The solution's own shortage: once more too; short again, that verdict stands.
    calls.clear()
    short = _traced(Status.RUNTIME_ERROR, "out of memory: CUDA out of memory. Tried to allocate")
    again = _traced(Status.RUNTIME_ERROR, "out of memory: CUDA out of memory, again")
    outcome = _evaluator_with_outcomes([short, again], calls).evaluate(_job())
    assert calls.count("attempt") == 2 and outcome.trace.evaluation.status is Status.RUNTIME_ERROR
    assert outcome.trace.evaluation.log.endswith("out of memory: CUDA out of memory, again")


def test_other_failures_and_skips_run_once() -> None:
    from kernelarena.data import Status
    from kernelarena.evaluate.judge.outcomes import Outcome

    for first in (
        _traced(Status.RUNTIME_ERROR, "illegal memory access"),
        _traced(Status.INCORRECT_NUMERICAL, "out of memory: a log that merely says so"),
        Outcome(skipped="not supported for this workload: out of memory"),
    ):
        calls: list[str] = []
        assert _evaluator_with_outcomes([first], calls).evaluate(_job()) is first
        assert calls == ["attempt"]


SHORT_OF_MEMORY = """import torch


def run(hidden_states, weight, eps, output):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.73 GiB")
"""


def test_a_solution_always_short_of_memory_fails_after_its_second_attempt(tmp_path: Path) -> None:
    """Through the real judge: the second attempt starts the reference's and the solution's
    processes anew, the verdict is the solution's shortage, and the next solution is judged as
    usual."""
    dataset = _dataset(tmp_path, "cpu", (8,))
    dataset.add_solution(
        Solution(
            name="rmsnorm_h128_short",
            definition=DEFINITION["name"],
            author="tests",
            spec=BuildSpec(language="python", target_hardware=["cpu"], entry_point="s.py::run"),
            sources=[SourceFile(path="s.py", content=SHORT_OF_MEMORY)],
        )
    )
    by_solution = {trace.solution: trace.evaluation for trace in run_on_cpu(dataset)}
    honest, short = by_solution["rmsnorm_h128_honest"], by_solution["rmsnorm_h128_short"]
    assert honest is not None and honest.status is Status.PASSED, honest
    assert short is not None and short.status is Status.RUNTIME_ERROR
    assert short.log.startswith("a first attempt ran out of device memory"), short.log
    assert "out of memory: " in short.log and "3.73 GiB" in short.log


def test_a_workload_too_large_with_everything_given_back_is_not_run_twice_again() -> None:
    """Its sets and its reference did not fit the device even alone: the next solutions' jobs on
    it are skipped at their first shortage, while another workload still gets its second try."""
    from kernelarena.evaluate.judge.outcomes import JUDGE_OUT_OF_MEMORY, Outcome

    def short() -> Outcome:
        return Outcome(skipped=f"{JUDGE_OUT_OF_MEMORY}: the reference's sandbox: 8.6 GiB")

    calls: list[str] = []
    evaluator = _evaluator_with_outcomes([short(), short(), short(), short(), short()], calls)
    for _ in range(2):
        outcome = evaluator.evaluate(_job("decode-64x32k"))
        assert outcome.skipped is not None and outcome.skipped.startswith(JUDGE_OUT_OF_MEMORY)
    assert calls.count("attempt") == 3 and calls.count("references closed") == 1
    evaluator.evaluate(_job("another"))
    assert calls.count("attempt") == 5 and calls.count("references closed") == 2
