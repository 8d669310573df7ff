"""The modules that moved into evaluate's wings keep their old names for one release
(evaluate/old_names.py): each old name is the new module itself, and ``python -m`` under an old
name runs the new module, as the sandbox's old command does."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelarena.evaluate.old_names import MOVED

SOURCE = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_name_is_the_new_module(old: str) -> None:
    new = importlib.import_module(MOVED[old])
    assert importlib.import_module(old) is new
    assert new.__name__ == new.__spec__.name == MOVED[old]  # its own spec, not the old name's
    package, _, leaf = old.rpartition(".")
    assert getattr(importlib.import_module(package), leaf) is new


def test_every_moved_module_is_in_its_wing() -> None:
    for new in MOVED.values():
        assert (SOURCE / (new.replace(".", "/") + ".py")).is_file(), new


def test_an_unknown_name_is_still_unknown() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("kernelarena.evaluate.no_such_module")


@pytest.mark.parametrize(
    ("command", "runs"),
    [
        ("kernelarena.evaluate.worker", "judge/worker.py"),
        ("kernelarena.evaluate.zygote", "sandbox/zygote.py"),
        ("kernelarena.evaluate.build_process", "executors/build_process.py"),
        ("kernelarena.evaluate.sandbox", "sandbox/server.py"),
    ],
)
def test_python_m_under_an_old_name_runs_the_new_module(command: str, runs: str) -> None:
    # No arguments: each main fails reading its first, in the file it was started as.
    paths = [str(SOURCE), *filter(None, [os.environ.get("PYTHONPATH")])]
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    done = subprocess.run(
        [sys.executable, "-m", command], capture_output=True, text=True, env=environment
    )
    assert done.returncode != 0
    assert "IndexError" in done.stderr and runs in done.stderr, done.stderr[-2000:]
