"""Several judges on one GPU (``KERNELARENA_JUDGES_PER_GPU``): their checks share the GPU's lock,
their measurements hold it alone, and an exclusive section inside a shared one goes back to shared.
Another open file of the lock stands in for another judge (``flock`` belongs to the open file)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from kernelarena.evaluate.executors.local import LocalExecutor
from kernelarena.evaluate.judge.device_lock import NO_LOCK, DeviceLock
from kernelarena.evaluate.options import judges_per_gpu


def _free_for(path: Path, how: int) -> bool:
    """Whether another judge could take the lock ``how`` (shared or exclusive) now."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_checks_share_the_gpu_and_measurements_hold_it_alone(tmp_path: Path) -> None:
    path = tmp_path / "gpu-cuda0.lock"
    lock = DeviceLock(path)
    try:
        with lock.shared():
            assert _free_for(path, fcntl.LOCK_SH)  # another judge's checks
            assert not _free_for(path, fcntl.LOCK_EX)  # another judge's timing waits
            with lock.exclusive():
                assert not _free_for(path, fcntl.LOCK_SH)
                with lock.shared():  # a check inside the timing: still alone
                    assert not _free_for(path, fcntl.LOCK_SH)
                assert not _free_for(path, fcntl.LOCK_SH)
            assert _free_for(path, fcntl.LOCK_SH)  # back to shared
            assert not _free_for(path, fcntl.LOCK_EX)
        assert _free_for(path, fcntl.LOCK_EX)
        with lock.exclusive():
            assert not _free_for(path, fcntl.LOCK_SH)
        assert _free_for(path, fcntl.LOCK_EX)
    finally:
        lock.close()


def test_a_section_that_raises_lets_the_lock_go(tmp_path: Path) -> None:
    path = tmp_path / "gpu-cuda0.lock"
    lock = DeviceLock(path)
    try:
        with pytest.raises(RuntimeError), lock.shared(), lock.exclusive():
            raise RuntimeError("a failed check")
        assert _free_for(path, fcntl.LOCK_EX)
    finally:
        lock.close()


def test_one_judge_a_gpu_takes_no_lock() -> None:
    with NO_LOCK.shared(), NO_LOCK.exclusive():
        pass


def test_the_number_of_judges_a_gpu_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KERNELARENA_JUDGES_PER_GPU", raising=False)
    assert judges_per_gpu() == 1
    monkeypatch.setenv("KERNELARENA_JUDGES_PER_GPU", "3")
    assert judges_per_gpu() == 3
    for wrong, said in (("two", "not a whole number"), ("0", "less than 1")):
        monkeypatch.setenv("KERNELARENA_JUDGES_PER_GPU", wrong)
        with pytest.raises(ValueError, match=f"KERNELARENA_JUDGES_PER_GPU: .*{said}"):
            judges_per_gpu()


def test_the_executor_starts_that_many_workers_a_gpu_sharing_its_lock(tmp_path: Path) -> None:
    executor = LocalExecutor(
        ["cuda:0", "cuda:1", "cpu"], log_dir=tmp_path, build_pool=False, judges_per_gpu=2
    )
    assert executor.devices == ["cuda:0", "cuda:0", "cuda:1", "cuda:1", "cpu"]
    command = executor._command("cuda:1", 7, str(tmp_path / "worker.log"))
    assert command[command.index("--gpu-lock") + 1] == str(tmp_path / "gpu-cuda1.lock")
    assert "--gpu-lock" not in executor._command("cpu", 7, str(tmp_path / "worker.log"))
    alone = LocalExecutor(["cuda:0"], log_dir=tmp_path, build_pool=False, judges_per_gpu=1)
    assert alone.devices == ["cuda:0"]
    assert "--gpu-lock" not in alone._command("cuda:0", 7, str(tmp_path / "worker.log"))


class _Recording:
    """A lock that says which sections are open."""

    def __init__(self) -> None:
        self.open: list[str] = []

    def _section(self, name: str) -> Any:
        @contextlib.contextmanager
        def section() -> Iterator[None]:
            self.open.append(name)
            try:
                yield
            finally:
                self.open.pop()

        return section()

    def shared(self) -> Any:
        return self._section("shared")

    def exclusive(self) -> Any:
        return self._section("exclusive")


def test_the_judge_checks_shared_and_takes_the_first_call_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The trials' calls after the first share the GPU; the first (where an autotuner times its
    configurations) holds it alone."""
    from kernelarena.data import Correctness, Performance, Workload
    from kernelarena.evaluate.judge import evaluator as evaluator_module
    from kernelarena.evaluate.judge import timing_check
    from kernelarena.evaluate.options import Options

    lock = _Recording()
    seen: list[tuple[str, list[str]]] = []

    def call(prepared: object) -> dict[str, object]:
        seen.append(("call", list(lock.open)))
        return {}

    def time_and_verify(sets: object, evaluator: object) -> tuple[Performance, str]:
        seen.append(("timing", list(lock.open)))
        return Performance(timing_mode="cuda_graph"), ""

    monkeypatch.setattr(timing_check, "time_and_verify", time_and_verify)
    job = SimpleNamespace(
        options=Options(trials=3), workload=Workload(uuid="w", axes={}, inputs={})
    )
    sets = SimpleNamespace(
        job=job,
        make=lambda *a, **k: SimpleNamespace(),
        expected=lambda prepared: {},
        call=call,
        compare_all=lambda *a: [],
        changed_input=lambda prepared: None,
        error_ratios=lambda *a: [],
        forget=lambda made: None,
        forget_all=lambda: None,
        capture_failed=False,
    )
    evaluator = evaluator_module.Evaluator.__new__(evaluator_module.Evaluator)
    evaluator.gpu = lock  # type: ignore[assignment]
    evaluator.device = torch.device("cpu")
    evaluator.arena = SimpleNamespace(mark=lambda: 0, rewind=lambda mark: None)  # type: ignore[assignment]
    evaluator.sandboxes = SimpleNamespace(spares_stopped=contextlib.nullcontext)  # type: ignore[assignment]
    evaluator._warm_up = None
    made: list[object] = []
    passed = SimpleNamespace(make_trace=lambda *a: made.append(a) or "trace", options=job.options)
    evaluator.environment = None  # type: ignore[assignment]
    outcome = evaluator._judged(sets, passed)  # type: ignore[arg-type]
    assert outcome.trace == "trace" and isinstance(made[0][3], Correctness)
    assert seen == [
        ("call", ["shared", "exclusive"]),
        ("call", ["shared"]),
        ("call", ["shared"]),
        ("timing", ["shared"]),  # its measurements take the GPU alone inside it (below)
    ]


def test_only_the_judges_own_thread_counts_its_waits(tmp_path: Path) -> None:
    """The stage clock is the judge's thread's: the warm-up thread's lock never touches it."""
    from kernelarena.evaluate.judge.stage_clock import JOB_STAGES

    for clocked in (True, False):
        lock = DeviceLock(tmp_path / "gpu-cuda0.lock", clocked=clocked)
        JOB_STAGES.begin("checks")
        try:
            with lock.shared():
                pass
        finally:
            stages = JOB_STAGES.take()
            lock.close()
        assert ("checks/gpu_lock" in stages) is clocked, stages


def test_the_timing_phase_measures_alone_and_checks_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe, the sandbox's timed calls, the judge's clocks and the reference's timing hold
    the GPU alone; the sets and the checks between them share it."""
    from kernelarena.data import Performance, Workload
    from kernelarena.evaluate.judge import timing_check
    from kernelarena.evaluate.judge.crosscheck import JudgeClock
    from kernelarena.evaluate.options import Options
    from kernelarena.evaluate.sandbox.timing import summarize

    lock = _Recording()
    steps: list[tuple[str, str]] = []

    def step(name: str, result: object = None) -> Any:
        def record(*args: object, **kwargs: object) -> object:
            steps.append((name, lock.open[-1] if lock.open else "none"))
            return result

        return record

    clock = JudgeClock(eager_call_ms=0.01, graph_call_ms=0.01)
    reported = summarize([0.01], "cuda_graph")
    for name, result in {
        "_probe": (True, False),
        "before_pass": None,
        "after_pass": None,
        "judge_clock": clock,
        "inputs_kept": None,
        "verify_after_timing": None,
        "verify_graph": None,
        "agreed_clock": (clock, "", reported),
        "host_submit_ms": 0.005,
        "eager_inflated": False,
        "evaluator_performance": Performance(timing_mode="cuda_graph"),
        "sets_filling_l2": 3,
    }.items():
        monkeypatch.setattr(timing_check, name, step(name, result))
    monkeypatch.setattr(timing_check, "reported_timing", lambda reply: reported)
    monkeypatch.setattr(timing_check, "_costs", lambda job: (None, None))
    job = SimpleNamespace(options=Options(), workload=Workload(uuid="w", axes={}, inputs={}))
    sets = SimpleNamespace(
        job=job,
        device=torch.device("cuda:0"),
        make_many=step("make_many", [SimpleNamespace(id=0, bytes=8), SimpleNamespace(id=1)]),
        sandbox=SimpleNamespace(request=step("sandbox:time", {"ok": True})),
        forget=step("forget"),
        capture_failed=False,
    )
    evaluator = SimpleNamespace(
        gpu=lock,
        environment=SimpleNamespace(ceilings={}),
        sandboxes=SimpleNamespace(spares_stopped=contextlib.nullcontext),
    )
    with lock.shared():
        performance, _ = timing_check.time_and_verify(sets, evaluator)  # type: ignore[arg-type]
    assert performance.capturable is True
    alone = {"_probe", "sandbox:time", "judge_clock", "agreed_clock", "host_submit_ms"}
    alone |= {"eager_inflated", "evaluator_performance"}
    for name, held in steps:
        assert held == ("exclusive" if name in alone else "shared"), (name, held)
    assert {name for name, _ in steps} >= alone | {"after_pass", "verify_graph", "make_many"}
