"""Run ``kernelarena`` (or a script) as a user does: a new process, through the real entry point,
with this test run's code (the environment's PYTHONPATH, made absolute, so a checkout's ``src``
wins here and the editable install in CI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def environment(**extra: str) -> dict[str, str]:
    paths = [
        str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
    ]
    # No GPU for these runs, so that what they print is the same on a GPU machine.
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "CUDA_VISIBLE_DEVICES": "", **extra}


def kernelarena(
    *arguments: str, cwd: Path | None = None, timeout: float = 300, **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelarena", *arguments],
        cwd=cwd,
        env=environment(**extra),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def python(script: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, script],
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
