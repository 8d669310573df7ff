"""Sets larger than an arena chunk, through the engine with timing on: the published rmsnorm_h128
shapes at batch 65536 (a set of 32 MiB, twice a CPU chunk) once failed honest solutions with
"input 'hidden_states' was modified by the solution" (issue 37), because two such sets shared
memory; ``--no-timing`` (one set at a time) passed."""

from __future__ import annotations

from pathlib import Path

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
    from kernelarena.evaluate.judge.evaluator import JUDGE_OUT_OF_MEMORY, Evaluator
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
