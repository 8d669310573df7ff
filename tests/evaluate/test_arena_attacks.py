"""Attacks on the arena through the engine, on the CPU (issue 36): a solution that truncates the
memory it shares with the judge (once a SIGBUS that killed the judge), and one that leaves an orphan
writing NaN over every arena mapping it inherited (once the next solution's verdict). Each fails
to touch anything but its own job; the honest solution judged after them passes. (Both tests fail
on the arena of /dev/shm files: SIGBUS, and NaN in the honest solution's outputs.) The orphan here
stops by itself after 15 s; killing it at once is the sandbox's PID namespace's work."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelarena.data import BuildSpec, Evaluation, Solution, SourceFile, Status, TraceSet
from kernelarena.evaluate.executors.benchmark import Benchmark
from kernelarena.evaluate.executors.jobs import Timeouts
from kernelarena.evaluate.options import Options
from tests.dispatch.toys import toy_definition, workload

# The arena's mappings in this process, whatever names them: memfds now, /dev/shm files before.
FIND_ARENA = """import ctypes, os, time


def arena_regions():
    regions = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "kernelarena-arena" in line or "/dev/shm/" in line:
                low, high = (int(v, 16) for v in line.split()[0].split("-"))
                regions.append((low, high, line.split(maxsplit=5)[-1].strip()))
    return regions
"""

TRUNCATES = (
    FIND_ARENA
    + """

def run(x, factor, out):
    for low, high, name in arena_regions():
        try:  # the mapping's file, through /proc (root may open it), or its path
            path = f"/proc/self/map_files/{low:x}-{high:x}"
            fd = os.open(path if os.path.exists(path) else name, os.O_RDWR)
            os.ftruncate(fd, 0)
            print("arena truncated:", name, flush=True)
        except OSError as error:
            print("arena truncation refused:", name, error.strerror, flush=True)
    out.copy_(x * factor)
"""
)

ORPHAN_WRITES = (
    FIND_ARENA
    + """
_started = []


def run(x, factor, out):
    out.copy_(x * factor)
    if _started:
        return
    _started.append(True)
    regions = arena_regions()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:  # re-parented to the judge: outside the sandbox's descendants
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                for low, high, _ in regions:
                    ctypes.memset(low, 0xFF, high - low)  # NaN in every float
                time.sleep(0.005)
            os._exit(0)
        os._exit(0)
    os.wait()
"""
)

HONEST = "def run(x, factor, out):\n    out.copy_(x * factor)\n"


def _solution(name: str, source: str) -> Solution:
    return Solution(
        name=f"toy_fp32_{name}",
        definition="toy_fp32",
        author="tests",
        spec=BuildSpec(language="python", target_hardware=["cpu"], entry_point="s.py::run"),
        sources=[SourceFile(path="s.py", content=source)],
    )


def _run(tmp_path: Path, solutions: list[tuple[str, str]]) -> dict[str, Evaluation]:
    definition = toy_definition()
    dataset = TraceSet(root=tmp_path)
    dataset.add_definition(definition)
    for name, source in solutions:
        dataset.add_solution(_solution(name, source))
    dataset.add_workload(definition.name, workload(definition, rows=64, cols=1000))
    traces = Benchmark(
        dataset,
        devices="cpu",
        options=Options(trials=3, timing=False),
        timeouts=Timeouts(build_s=120, run_s=120, startup_s=300),
    ).run_all()
    evaluations = {str(t.solution): t.evaluation for t in traces if t.evaluation is not None}
    assert set(evaluations) == {f"toy_fp32_{name}" for name, _ in solutions}
    return evaluations


@pytest.mark.timeout(600)
def test_truncating_the_arena_is_refused_and_the_judge_lives_on(tmp_path: Path) -> None:
    evaluations = _run(tmp_path, [("truncates", TRUNCATES), ("honest", HONEST)])
    truncates, honest = evaluations["toy_fp32_truncates"], evaluations["toy_fp32_honest"]
    assert "arena truncation refused" in truncates.log, truncates.log
    assert "arena truncated:" not in truncates.log
    assert truncates.status is Status.PASSED, truncates.log  # its attack failed; its work was right
    assert honest.status is Status.PASSED, honest.log
    assert "died" not in honest.log


@pytest.mark.timeout(600)
def test_an_orphan_writing_its_arena_does_not_reach_the_next_solution(tmp_path: Path) -> None:
    evaluations = _run(tmp_path, [("orphan", ORPHAN_WRITES), ("honest", HONEST)])
    honest = evaluations["toy_fp32_honest"]
    assert honest.status is Status.PASSED, honest.log
