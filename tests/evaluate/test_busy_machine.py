"""Honest solutions pass on a busy machine: other programs holding every core stretch the judge's
wall clocks, never into a rejection (``judge_clock.agreed_clock``). And the CPU-time clock that
decides then counts the work, so a forged time is still rejected under the same load."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernelarena.data import Status
from kernelarena.evaluate.executors.benchmark import Benchmark
from kernelarena.evaluate.executors.jobs import Timeouts
from kernelarena.evaluate.judge.judge_clock import _cpu_ticks, cpu_time_clock
from kernelarena.evaluate.options import Options
from tests.evaluate.bad_solutions import FIXTURES, trace_set

ADVERSARIES = Path(__file__).parent.parent / "fixtures" / "adversarial"


@pytest.fixture
def burners() -> Iterator[None]:
    """Two busy processes per core, for as long as the test runs."""
    count = 2 * (os.cpu_count() or 2)
    processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for process in processes:
            process.kill()
            process.wait()


@pytest.mark.loaded
@pytest.mark.timeout(900)
def test_honest_solutions_pass_while_other_programs_hold_every_core(
    burners: None, tmp_path: Path
) -> None:
    cases = {
        "good": (Status.PASSED, True, ""),
        "slow_good": (Status.PASSED, True, ""),
        "forges_time_reply": (Status.RUNTIME_ERROR, True, "timing rejected"),
    }
    benchmark = Benchmark(
        trace_set(cases, root=tmp_path, sizes=(1000, 100_000), folders=(ADVERSARIES, FIXTURES)),
        devices="cpu",
        options=Options(trials=2, budget_ms=20, max_iterations=20),
        timeouts=Timeouts(build_s=300, run_s=120, startup_s=600),
    )
    traces = benchmark.run_all()
    verdicts = {(t.solution, t.workload.uuid): t.evaluation for t in traces}
    assert len(verdicts) == 2 * (len(cases) + 1)
    for (solution, workload), evaluation in verdicts.items():
        assert evaluation is not None
        stem = str(solution).removeprefix("vector_scale_").removesuffix("_first")
        status, _, phrase = cases.get(stem, (Status.PASSED, True, ""))
        assert evaluation.status is status, f"{solution} {workload}:\n{evaluation.log}"
        assert phrase in evaluation.log


_MS_PER_CALL = 5.0
# A definition whose only output is in place: the stand-in's passes are not compared.
_IN_PLACE = SimpleNamespace(outputs={"out": SimpleNamespace(aliases="x")})


def _stand_in_sandbox(conn: Any) -> None:
    """Spins ``count`` times ``_MS_PER_CALL`` of CPU time for each count it is sent."""
    while True:
        count = conn.recv()
        deadline = time.process_time() + count * _MS_PER_CALL * 1e-3
        while time.process_time() < deadline:
            pass
        conn.send(True)


@pytest.mark.loaded
def test_the_cpu_time_clock_counts_the_sandboxs_work_not_the_wall(burners: None) -> None:
    """A stand-in sandbox whose calls cost 5 ms of CPU time each, run as a process of its own
    beside the burners: the clock reads about 5 ms a call, however long the wall took."""
    context = multiprocessing.get_context("spawn")
    parent, child_end = context.Pipe()
    child = context.Process(target=_stand_in_sandbox, args=(child_end,), daemon=True)
    child.start()
    try:
        assert child.pid is not None

        def request(kind: str, ids: list[int], count: int) -> dict[str, Any]:
            parent.send(count)
            parent.recv()
            return {"ok": True}

        request("ready", [], 0)  # the child has imported what it imports
        sets: Any = SimpleNamespace(
            device=SimpleNamespace(type="cpu"),
            sandbox=SimpleNamespace(pid=child.pid, request=request),
            job=SimpleNamespace(destination_passing_style=True, definition=_IN_PLACE),
        )
        started = time.monotonic()
        clock = cpu_time_clock(sets, [SimpleNamespace(id=0)])
        wall = time.monotonic() - started
        assert clock is not None
        assert 4.0 < clock.eager_call_ms < 6.5, (clock, wall)
        assert _cpu_ticks(child.pid) > 0
    finally:
        child.kill()
        child.join()
