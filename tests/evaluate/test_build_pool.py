"""The build pool: CUDA solutions compiled ahead, in parallel, each in a confined process, into the
cache their sandboxes load from; failures cached with the compiler's first error; evaluation of
what is built starts while other builds still run; ``kernelarena build`` goes through it too."""

from __future__ import annotations

import importlib.util
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from kernelarena.compile import CachedBuildError, build_solution, first_error
from kernelarena.compile.cache import sandbox_cache
from kernelarena.data import BuildSpec, Solution, SourceFile, Status, TraceSet
from kernelarena.evaluate.executors.build_pool import BuildOutcome, BuildPool
from kernelarena.evaluate.executors.build_targets import build_target, pool_slots
from kernelarena.evaluate.executors.jobs import JobResult, Timeouts
from kernelarena.evaluate.executors.local import LocalExecutor
from kernelarena.evaluate.executors.runner import plan, run_jobs
from kernelarena.evaluate.sandbox.solution_caches import namespace_of
from tests import cli_process
from tests.evaluate.bad_solutions import DEFINITION, trace_set

NO_NVCC = shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists()
needs_nvcc = pytest.mark.skipif(
    NO_NVCC or importlib.util.find_spec("tvm_ffi") is None,
    reason="needs nvcc (a CUDA toolkit) and apache-tvm-ffi to compile CUDA for sm_90a",
)

KERNEL = """#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
__global__ void scale_kernel(const float* x, float factor, float* out, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = %s;
}
void run(tvm::ffi::TensorView x, double factor, tvm::ffi::TensorView out) {
  int64_t n = x.size(0);
  scale_kernel<<<(n + 255) / 256, 256>>>(static_cast<const float*>(x.data_ptr()),
      static_cast<float>(factor), static_cast<float*>(out.data_ptr()), n);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
"""
UNDEFINED = 'k.cu(5): error: identifier "undefined_factor" is undefined'


def cuda_solution(name: str, expression: str) -> Solution:
    return Solution(
        name=f"vector_scale_{name}",
        definition=DEFINITION.name,
        author="tests",
        spec=BuildSpec(language="cuda", target_hardware=["sm_90a"], entry_point="k.cu::run"),
        sources=[SourceFile(path="k.cu", content=KERNEL % expression)],
    )


GOOD = [cuda_solution(f"cuda{i}", f"x[i] * factor + {i}.0f * 0.0f") for i in (1, 2)]
BAD = cuda_solution("cuda_bad", "x[i] * undefined_factor")


def build_all(slots: int) -> dict[str, BuildOutcome]:
    with BuildPool(slots) as pool:
        keys = {s.name: pool.submit(DEFINITION, s, "sm_90a") for s in [*GOOD, BAD]}
        assert pool.wait(timeout=600)
        found = {name: pool.outcome(key) for name, key in keys.items()}
    assert all(outcome is not None for outcome in found.values())
    return {name: outcome for name, outcome in found.items() if outcome is not None}


@pytest.fixture(scope="module")
def two_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, list[dict[str, BuildOutcome]]]:
    """Two pools, one after the other, over the same cache: a run and the next."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNELARENA_CACHE", str(cache))
        return cache, [build_all(slots=2), build_all(slots=2)]


@needs_nvcc
def test_cuda_solutions_build_in_parallel_into_their_sandbox_caches(
    two_runs: tuple[Path, list[dict[str, BuildOutcome]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, (first, _) = two_runs
    monkeypatch.setenv("KERNELARENA_CACHE", str(cache))
    one, two = (first[s.name] for s in GOOD)
    assert (one.status, two.status) == ("built", "built"), (one.detail, two.detail)
    # Two slots: both compiles ran at once.
    assert one.started < two.started + two.seconds and two.started < one.started + one.seconds
    for solution, outcome in zip(GOOD, (one, two), strict=True):
        own = sandbox_cache(namespace_of(solution))
        assert Path(outcome.detail).is_file() and Path(outcome.detail).is_relative_to(own)
    # What the sandbox does before its solution's first job: the same build, found in the cache
    # (the compiler is not called).
    import tvm_ffi.cpp

    def no_compiler(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled again: the pool's build was not found")

    monkeypatch.setattr(tvm_ffi.cpp, "build", no_compiler)
    monkeypatch.setenv("KERNELARENA_CACHE", str(sandbox_cache(namespace_of(GOOD[0]))))
    runnable = build_solution(DEFINITION, GOOD[0], "sm_90a")
    assert runnable.artifact == one.detail


@needs_nvcc
def test_a_failed_build_is_reported_from_the_cache_on_the_next_run(
    two_runs: tuple[Path, list[dict[str, BuildOutcome]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, (first, second) = two_runs
    monkeypatch.setenv("KERNELARENA_CACHE", str(cache))
    failed, again = first[BAD.name], second[BAD.name]
    assert failed.status == "failed" and not failed.cached
    assert failed.first_error == UNDEFINED, failed.detail
    assert "1 error detected" in failed.detail  # the compiler's log is the verdict's evidence
    # The next run: the same error, read from the cache without compiling (CachedBuildError is
    # raised before any build starts).
    assert again.status == "failed" and again.cached
    assert again.first_error == UNDEFINED and again.brief == UNDEFINED + " (cached: failed before)"
    assert second[GOOD[0].name].status == "built"
    # The sandbox's own build of it raises the cached error too.
    monkeypatch.setenv("KERNELARENA_CACHE", str(sandbox_cache(namespace_of(BAD))))
    with pytest.raises(CachedBuildError, match="undefined_factor"):
        build_solution(DEFINITION, BAD, "sm_90a")


def test_first_error_reads_nvcc_gcc_and_the_linker() -> None:
    nvcc = "FAILED: cuda_0.o\nnvcc warning : x\n/c/build/ab/k.cu(3): error: bad\n2 errors detected"
    assert first_error(nvcc) == "k.cu(3): error: bad"
    gcc = "ninja: build stopped\n/c/x/main.cpp:3:10: fatal error: cute/tensor.hpp: No such file"
    assert first_error(gcc) == "main.cpp:3:10: fatal error: cute/tensor.hpp: No such file"
    linker = "FAILED: a.so\n/usr/bin/ld: cannot find -lfoo: No such file or directory"
    assert first_error(linker) == "/usr/bin/ld: cannot find -lfoo: No such file or directory"


def test_slots_and_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELARENA_BUILD_SLOTS", "3")
    assert pool_slots(devices=8) == 3
    monkeypatch.delenv("KERNELARENA_BUILD_SLOTS")
    assert pool_slots(devices=64) == 1  # judges take every core: one build at a time
    assert build_target("cpu") == "cpu"


def test_one_nvidia_smi_answers_the_count_the_target_and_the_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent's questions about the GPUs (how many, which architecture, the smallest one's
    memory) are one nvidia-smi process, however often they are asked."""
    from kernelarena.evaluate.executors import devices
    from kernelarena.evaluate.executors.runner import device_memory_bytes

    calls = tmp_path / "calls"
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nprintf "0, 9.0, 81559\\n1, 9.0, 143771\\n"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    devices.host_gpus.cache_clear()
    try:
        assert devices.visible_gpu_count() == 2
        assert devices.resolve_devices("cuda") == ["cuda:0", "cuda:1"]
        assert build_target("cuda:1") == "sm_90a"
        assert device_memory_bytes(on_gpu=True) == 81559 * 2**20
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
        assert devices.visible_gpu_count() == 1
        assert len(calls.read_text().splitlines()) == 1, calls.read_text()
    finally:
        devices.host_gpus.cache_clear()


class _HeldBuilds(BuildPool):
    """Builds that finish only when the test says so: no compiler, no wall-clock luck."""

    def __init__(self) -> None:
        super().__init__(slots=1)
        self.release = threading.Event()
        self.started = threading.Event()

    def _build(self, request: object) -> BuildOutcome:
        self.started.set()
        assert self.release.wait(timeout=600), "never released"
        return BuildOutcome("failed", "k.cu(1): error: held on purpose\n1 error detected", "x")


def test_evaluation_starts_while_a_build_still_runs(tmp_path: Path) -> None:
    """The CUDA solution comes first in the plan, but its build is held until a Python
    solution's verdict is in: the worker takes the built solution's jobs meanwhile, and the
    CUDA solution's job then gets its build's verdict, a compile error with the log."""
    made = trace_set({}, root=tmp_path / "dataset")
    held = cuda_solution("cuda_held", "x[i] * factor")
    made.solutions = {held.name: held, **made.solutions}
    jobs = plan(made, [DEFINITION.name])
    assert [j.solution.name for j in jobs] == [held.name, "vector_scale_good_first"]
    pool = _HeldBuilds()
    order: list[tuple[str, int]] = []

    def progress(job: object, result: JobResult | None) -> None:
        name = job.solution.name  # type: ignore[attr-defined]
        order.append((name, pool.pending()))
        pool.release.set()

    timeouts = Timeouts(build_s=300, run_s=300, startup_s=300)
    with LocalExecutor(["cpu"], timeouts, measure_ceilings=False, build_pool=pool) as executor:
        summary = run_jobs(jobs, executor, None, on_progress=progress)
    # The Python solution's verdict came while the CUDA build was still held (pending).
    assert order == [("vector_scale_good_first", 1), (held.name, 0)]
    verdicts = {t.solution: t.evaluation for t in summary.traces if t.evaluation is not None}
    assert verdicts["vector_scale_good_first"].status is Status.PASSED
    failed = verdicts[held.name]
    assert failed.status is Status.COMPILE_ERROR and "held on purpose" in failed.log
    assert summary.builds["by_status"] == {"failed": 1}


@needs_nvcc
def test_kernelarena_build_twice_on_a_fresh_folder(tmp_path: Path) -> None:
    made = TraceSet(root=tmp_path / "dataset")
    made.add_definition(DEFINITION)
    for solution in (GOOD[0], BAD):
        made.add_solution(solution)
    made.save(tmp_path / "dataset")
    arguments = ("build", DEFINITION.name, "--dataset", str(tmp_path / "dataset"))
    environment = {"KERNELARENA_CACHE": str(tmp_path / "cache")}
    first = cli_process.kernelarena(*arguments, timeout=600, **environment)
    assert first.returncode == 1, first.stdout + first.stderr
    said = " ".join(first.stdout.split())
    assert f"failed: {BAD.name}: {UNDEFINED}" in said, first.stdout
    assert "1 built or skipped, 1 failed" in said
    second = cli_process.kernelarena(*arguments, timeout=600, **environment)
    assert second.returncode == 1, second.stdout + second.stderr
    said = " ".join(second.stdout.split())
    assert f"failed: {BAD.name}: {UNDEFINED} (cached: failed before)" in said, second.stdout
    assert "1 built or skipped, 1 failed" in said
    # Built into the trusted cache, where apply loads from.
    assert list((tmp_path / "cache" / "build" / "tvm_ffi").glob("*/solution_*.so"))


def test_the_pools_set_up_is_done_while_the_workers_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's imports and each device's build target (an nvidia-smi on a GPU) come before
    the wait for the workers, not between their ready and the run's first job."""
    from types import SimpleNamespace

    from kernelarena.evaluate.executors import build_targets

    events: list[str] = []
    monkeypatch.setattr(
        build_targets, "build_target", lambda device: events.append(f"target {device}") or "x"
    )
    executor = LocalExecutor(["cuda:0", "cuda:1"], Timeouts(), log_dir=tmp_path, judges_per_gpu=1)

    def await_ready(worker: Any) -> Any:
        events.append(f"ready {worker.device}")
        worker.environment, worker.startup = {"device": worker.device}, {}
        return worker

    monkeypatch.setattr(executor, "_spawn", lambda device: SimpleNamespace(device=device))
    monkeypatch.setattr(executor, "_await_ready", await_ready)
    executor.start()
    assert events == ["target cuda:0", "target cuda:1", "ready cuda:0", "ready cuda:1"]
