"""A run killed with SIGKILL midway, then resumed, ends with every job's trace exactly once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from kernelarena.data import TraceSet
from kernelarena.evaluate.executors.leftovers import OWNER_FILE
from tests.evaluate.bad_solutions import DEFINITION, solution, trace_set

SIZES = tuple(range(100, 1700, 100))  # 16 workloads


def _command(dataset: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "kernelarena.cli",
        "run",
        DEFINITION.name,
        "--dataset",
        str(dataset),
        "--device",
        "cpu",
        "--trials",
        "1",
        "--allow-failures",
        *extra,
    ]


def _trace_lines(dataset: Path) -> list[str]:
    path = dataset / "traces" / DEFINITION.op_type / f"{DEFINITION.name}.jsonl"
    return path.read_text().splitlines() if path.exists() else []


def _owned_by(pid: int) -> list[Path]:
    found = []
    for folder in Path(tempfile.gettempdir()).glob("kernelarena-workers-*"):
        with contextlib.suppress(OSError, IndexError):
            if (folder / OWNER_FILE).read_text().split()[0] == str(pid):
                found.append(folder)
    return found


@pytest.mark.timeout(300)
def test_sigkill_then_resume_runs_every_job_once(tmp_path: Path) -> None:
    dataset = tmp_path / "dataset"
    made = trace_set({}, root=dataset, sizes=SIZES)
    made.add_solution(solution("slow_good", True))
    jobs = len(made.solutions) * len(SIZES)
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    first = subprocess.Popen(
        _command(dataset),
        env=environment,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while len(_trace_lines(dataset)) < 5 and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.05)
    killed_folders = _owned_by(first.pid)
    assert killed_folders, "the run being killed marked no folder as its own"
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    written = len(_trace_lines(dataset))
    assert 5 <= written < jobs, f"the kill came too late or too early ({written} of {jobs} traces)"

    resumed = subprocess.run(
        _command(dataset, "--resume"), env=environment, capture_output=True, text=True, timeout=240
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # The killed run could not remove its folders; the resumed one did (evaluate/executors/leftovers.py).
    left = [f for f in killed_folders if f.exists()]
    assert not left, f"folders of the killed run left behind: {left}"
    assert (
        f"{written} already done" in resumed.stdout.replace("\n", " ")
        or "already done" in resumed.stdout
    )

    loaded = TraceSet.load(dataset)
    assert not [p for p in loaded.problems if "traces" in p.file], loaded.problems
    keys = Counter((t.solution, t.workload.uuid) for t in loaded.traces[DEFINITION.name])
    assert len(keys) == jobs, f"{len(keys)} distinct jobs traced, expected {jobs}"
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]
