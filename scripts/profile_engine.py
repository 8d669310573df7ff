"""Where an engine run's time goes on a GPU: worker start phases, then each evaluation (wall and
cProfile). Run from the repository root on the GPU machine; prints only (a development aid)."""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

started = time.perf_counter()
import torch  # noqa: E402

t_import = time.perf_counter() - started
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    device = torch.device("cuda:0")
    t = time.perf_counter()
    torch.cuda.set_device(device)
    torch.ones(1, device=device).sum().item()
    t_init = time.perf_counter() - t
    from kernelarena.evaluate.ceilings import measure_ceilings
    from kernelarena.evaluate.environment import describe
    from kernelarena.evaluate.evaluator import Evaluator
    from kernelarena.evaluate.options import Options

    t = time.perf_counter()
    ceilings = measure_ceilings(device)
    t_ceil = time.perf_counter() - t
    t = time.perf_counter()
    ceilings = measure_ceilings(device)
    t_ceil2 = time.perf_counter() - t
    print(
        f"import torch {t_import:.2f} s, cuda init {t_init:.2f} s, ceilings {t_ceil:.2f} s (again {t_ceil2:.2f} s)"
    )
    from benchmarks.bench_engine import BATCHES, RMSNORM_SOLUTIONS

    from kernelarena.library import load_library

    library = load_library()
    definition = library.definitions["rmsnorm_bf16"]
    evaluator = Evaluator(device, describe(device, ceilings))
    from kernelarena.data import RandomInput, ScalarInput, Workload

    workloads = []
    for batch in BATCHES:
        inputs = {n: RandomInput() for n in definition.inputs}
        for n, spec in definition.inputs.items():
            if spec.shape is None:
                inputs[n] = ScalarInput(value=1e-6)
        axes = {
            k: v
            for k, v in {"rows": batch, "batch": batch, "hidden": 4096}.items()
            if k in definition.var_axes
        }
        workloads.append(
            Workload(uuid=f"engine-bench-{batch}", axes=axes, inputs=inputs, tags=["engine"])
        )
    solutions = [
        s
        for s in library.solutions_for(definition.name)
        if any(s.name.endswith("_" + x) for x in RMSNORM_SOLUTIONS)
    ]
    print("solutions", [s.name for s in solutions])
    # Seconds per evaluator phase (nested phases count inside their callers too).
    phase_seconds: dict[str, float] = {}

    def timed(name: str) -> None:
        original = getattr(Evaluator, name)

        def wrapper(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                phase_seconds[name] = phase_seconds.get(name, 0.0) + time.perf_counter() - t

        setattr(Evaluator, name, wrapper)

    for name in (
        "_build",
        "_check",
        "_time",
        "_short",
        "_graph",
        "_events_or_clock",
        "_check_after_timing",
        "_prepare",
        "_expected",
        "_compare_all",
        "_call",
    ):
        timed(name)
    for label in ("pass1", "pass2"):
        profiler = cProfile.Profile()
        total = time.perf_counter()
        for solution in solutions:
            for workload in workloads:
                t = time.perf_counter()
                profiler.enable()
                outcome = evaluator.evaluate(definition, solution, workload, Options())
                profiler.disable()
                ev = outcome.trace.evaluation if outcome.trace else None
                perf = ev.performance if ev else None
                print(
                    f"{label} {solution.name:28s} {workload.uuid:20s} {time.perf_counter() - t:6.3f} s "
                    f"{ev.status.value if ev else outcome.skipped} {perf.timing_mode if perf else ''} {perf.latency_ms if perf else ''}"
                )
        print(f"{label} total {time.perf_counter() - total:.2f} s")
        print(f"{label} phases: " + ", ".join(f"{k} {v:.3f}" for k, v in phase_seconds.items()))
        phase_seconds.clear()
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("cumulative").print_stats(45)
        print(stream.getvalue()[:9000])
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(25)
        print(stream.getvalue()[:5000])


if __name__ == "__main__":
    main()
