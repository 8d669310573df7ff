"""Solutions that attack their own verdict. Each must end anything but PASSED, and a good solution
in the same run must still pass, timed as it is when run alone. The suite is the spec of what the
judge/sandbox split (``docs/evaluation.md``, "Threat model") defends against."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

import kernelarena.runtime.compare as judge_module
from kernelarena.compile.cache import cache_root, sandbox_cache
from kernelarena.data import Status, Trace
from kernelarena.evaluate.executors.benchmark import Benchmark
from kernelarena.evaluate.executors.jobs import Timeouts
from kernelarena.evaluate.options import Options
from kernelarena.evaluate.sandbox.bytecode import bytecode_folder
from kernelarena.evaluate.sandbox.confine import landlock_abi
from kernelarena.evaluate.sandbox.isolation import walls
from kernelarena.evaluate.sandbox.solution_caches import LIBRARY_NAMESPACE
from tests.evaluate.bad_solutions import FIXTURES, trace_set

ADVERSARIES = Path(__file__).parent.parent / "fixtures" / "adversarial"
NUMERICAL = (Status.INCORRECT_NUMERICAL, True, "")
# Inside namespaces the dataset is not in the sandbox's view and the trusted caches are bound
# read-only; without them, Landlock refuses the writes.
_WALLED = walls().available
_OUT_OF_VIEW = "No such file or directory" if _WALLED else "PermissionError"
# Refused by the read-only bind, or, where the caches live in the sandbox's own /tmp (a GPU host's
# KERNELARENA_CACHE=/tmp/...), by Landlock: either phrase ("|" separates them).
_READ_ONLY = "Read-only file system|Permission denied" if _WALLED else "PermissionError"
REJECTED = (Status.RUNTIME_ERROR, True, "timing rejected")

# solution file -> (expected status, destination-passing style, a phrase the log must contain)
CPU_ATTACKS: dict[str, tuple[Status, bool, str]] = {
    "patch_compare_at_import": NUMERICAL,
    "patch_compare_at_call": NUMERICAL,
    "patch_torch_checker": NUMERICAL,
    "patch_timers": REJECTED,
    "forges_time_reply": REJECTED,
    "caches_output": (Status.INCORRECT_NUMERICAL, True, "reuses results across calls"),
    "reads_expected": NUMERICAL,
    "writes_judge_files": (Status.RUNTIME_ERROR, True, _OUT_OF_VIEW),
    "plants_bytecode": (Status.RUNTIME_ERROR, True, _READ_ONLY),
    "plants_build_cache": (Status.RUNTIME_ERROR, True, _READ_ONLY),
    "forks_child": (Status.RUNTIME_ERROR, True, "process(es) running after its job"),
    "exits_early": (Status.RUNTIME_ERROR, True, "exited with code 0"),
    # Refused (Landlock's scope), or not even seen: a forked CPU sandbox's parent is in another
    # PID namespace (``zygote``), so getppid() is 0.
    "signals_judge": (Status.RUNTIME_ERROR, True, "PermissionError|'/proc/0/mem'"),
    "writes_late": NUMERICAL,
    "computes_only_when_poisoned": (Status.INCORRECT_NUMERICAL, True, "already held values"),
    "rewrites_input_when_timed": (Status.INCORRECT_NUMERICAL, True, "during the timed calls"),
    "skips_work_when_timed": (Status.INCORRECT_NUMERICAL, True, "outputs of the timed calls"),
    "wrong_after_many_calls": (Status.INCORRECT_NUMERICAL, True, "every timed call is checked"),
    "caches_on_sampled_key": (Status.INCORRECT_NUMERICAL, True, "reuses results across calls"),
    "returns_lazy_tensor": (Status.INCORRECT_SHAPE, False, "not a plain tensor"),
}
GPU_ATTACKS: dict[str, tuple[Status | frozenset[Status], bool, str]] = {
    **CPU_ATTACKS,
    # A thread writes the right answer 50 ms after the call returns. On a GPU two checks race for
    # it: the write lands between the stream-order check's two looks (the device synchronized
    # in between, which a loaded host can stretch past 50 ms) or after both, into poison.
    "writes_late": (
        frozenset({Status.INCORRECT_NUMERICAL, Status.RUNTIME_ERROR}),
        True,
        "",
    ),
    # Outputs written on a stream the caller's never waits for: a caller reads them unfinished.
    "side_stream": (Status.RUNTIME_ERROR, True, "still being written after the call returned"),
    "side_stream_value": (
        Status.RUNTIME_ERROR,
        False,
        "still being written after the call returned",
    ),
}
# A graph without the work its calls do gains nothing: its replays are checked, and the job is
# timed again with CUDA events in a fresh sandbox, every call doing the work; the trace says the
# solution's graph failed, so that apply never runs it inside a capture. An honest kernel launched
# on the legacy default stream (a published FlashInfer-Bench solution) is in the same place.
RETIMED = (Status.PASSED, "timed again with CUDA events")
GPU_RETIMED: dict[str, tuple[Status, bool, str]] = {
    "skips_work_in_capture": (RETIMED[0], True, RETIMED[1]),
    "skips_work_in_capture_value": (RETIMED[0], False, RETIMED[1]),
}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(
    cases: dict[str, tuple[Status | frozenset[Status], bool, str]],
    devices: str,
    root: Path,
    size: int,
) -> dict[str, Trace]:
    benchmark = Benchmark(
        trace_set(cases, root=root, sizes=(size,), folders=(ADVERSARIES, FIXTURES)),
        devices=devices,
        options=Options(trials=2, budget_ms=20, max_iterations=20),
        timeouts=Timeouts(build_s=120, run_s=20, startup_s=300),
    )
    return {t.solution or "": t for t in benchmark.run_all()}


def _attack(
    devices: str,
    cases: dict[str, tuple[Status | frozenset[Status], bool, str]],
    tmp_path: Path,
    size: int,
    retimed: dict[str, tuple[Status, bool, str]] | None = None,
) -> None:
    if landlock_abi() < 1:
        pytest.skip("this kernel has no Landlock: file writes of solutions are not confined")
    alone = _run({}, devices, tmp_path / "alone", size)["vector_scale_good_first"]
    dataset = tmp_path / "attacked"
    dataset.mkdir()
    os.environ["KERNELARENA_ADVERSARY_DATASET"] = str(dataset)
    # Trusted processes load these; a sandbox writes only its own solution's caches.
    caches = [cache_root() / "tvm_ffi", sandbox_cache(LIBRARY_NAMESPACE), sandbox_cache("another")]
    os.environ["KERNELARENA_ADVERSARY_CACHES"] = os.pathsep.join(map(str, caches))
    judge_file = Path(judge_module.__file__)
    before = _digest(judge_file)
    try:
        by_solution = _run({**cases, **(retimed or {})}, devices, dataset, size)
    finally:
        del os.environ["KERNELARENA_ADVERSARY_DATASET"]
        del os.environ["KERNELARENA_ADVERSARY_CACHES"]
    for stem, (status, _, phrase) in cases.items():
        evaluation = by_solution[f"vector_scale_{stem}"].evaluation
        assert evaluation is not None
        assert evaluation.status is not Status.PASSED, f"{stem} PASSED:\n{evaluation.log}"
        allowed = status if isinstance(status, frozenset) else {status}
        assert evaluation.status in allowed, f"{stem}: {evaluation.status}:\n{evaluation.log}"
        phrases = phrase.split("|")
        assert any(p in evaluation.log for p in phrases), (
            f"{stem}: log lacks {phrase!r}:\n{evaluation.log}"
        )
    for stem, (status, _, phrase) in (retimed or {}).items():
        evaluation = by_solution[f"vector_scale_{stem}"].evaluation
        assert evaluation is not None and evaluation.status is status, evaluation
        assert phrase in evaluation.log, f"{stem}: log lacks {phrase!r}:\n{evaluation.log}"
        assert evaluation.performance is not None
        assert evaluation.performance.capturable is False, evaluation.performance
    assert not (dataset / "planted.txt").exists()
    assert not list(bytecode_folder().glob("planted_by_a_solution*"))
    assert not [c for c in caches if (c / "planted_by_a_solution.so").exists()]
    assert _digest(judge_file) == before
    good = by_solution["vector_scale_good_first"].evaluation
    assert good is not None and good.status is Status.PASSED, good
    assert alone.evaluation is not None and alone.evaluation.performance is not None
    assert good.performance is not None
    ratio = good.performance.latency_ms / alone.evaluation.performance.latency_ms
    # On a GPU the same figure within noise; on two shared CPU cores, within the noise of a
    # 5-us Python call beside other test processes.
    assert (0.8 < ratio < 1.25) if devices.startswith("cuda") else (0.25 < ratio < 4), ratio


@pytest.mark.timeout(600)
def test_attacks_on_the_verdict_fail_on_cpu(tmp_path: Path) -> None:
    _attack("cpu", CPU_ATTACKS, tmp_path, 1000)


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_attacks_on_the_verdict_fail_on_gpu(tmp_path: Path) -> None:
    _attack("cuda:0", GPU_ATTACKS, tmp_path, 1 << 20, GPU_RETIMED)
