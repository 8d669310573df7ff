"""Folders a killed run leaves behind are removed by the next executor that starts; folders of live
runs, of other pid namespaces and without an owner are left alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kernelarena.evaluate.executors import leftovers
from kernelarena.evaluate.executors.leftovers import OWNER_FILE, mark_owner, owner_gone, sweep
from kernelarena.evaluate.sandbox.confine import stat_fields


def _folder(root: Path, name: str) -> Path:
    folder = root / name
    (folder / "sandbox-1").mkdir(parents=True)
    (folder / "worker-cpu-1.log").write_text("a log\n")
    return folder


def _owned_by_a_dead_process(folder: Path) -> None:
    """An owner file written by a process that has exited since."""
    script = (
        "import sys; from pathlib import Path; "
        "from kernelarena.evaluate.executors.leftovers import mark_owner; mark_owner(Path(sys.argv[1]))"
    )
    subprocess.run([sys.executable, "-c", script, str(folder)], check=True)
    assert (folder / OWNER_FILE).exists()


def test_a_dead_owners_folders_and_arenas_are_removed_and_the_rest_kept(tmp_path: Path) -> None:
    temp, shm = tmp_path / "tmp", tmp_path / "shm"
    shm.mkdir()
    dead = _folder(temp, "kernelarena-workers-dead")
    _owned_by_a_dead_process(dead)
    (shm / "kernelarena-workers-dead-arena-x1").mkdir()
    dead_blobs = _folder(temp, "kernelarena-blobs-dead")
    _owned_by_a_dead_process(dead_blobs)
    live = _folder(temp, "kernelarena-workers-live")
    mark_owner(live)
    (shm / "kernelarena-workers-live-arena-x2").mkdir()
    unowned = _folder(temp, "kernelarena-workers-unowned")
    other = _folder(temp, "unrelated-folder")
    _owned_by_a_dead_process(other)

    removed = sweep(temp, shm)

    assert sorted(p.name for p in removed) == ["kernelarena-blobs-dead", "kernelarena-workers-dead"]
    assert not dead.exists() and not dead_blobs.exists()
    assert not (shm / "kernelarena-workers-dead-arena-x1").exists()
    assert live.exists() and (shm / "kernelarena-workers-live-arena-x2").exists()
    assert unowned.exists() and other.exists()


def test_an_owner_of_another_pid_namespace_is_not_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path, "kernelarena-workers-elsewhere")
    _owned_by_a_dead_process(folder)
    assert owner_gone(folder)
    monkeypatch.setattr(leftovers, "_namespace", lambda: "pid:[another]")
    assert not owner_gone(folder)


def test_a_reused_pid_does_not_keep_a_dead_owners_folder(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "kernelarena-workers-reused")
    mark_owner(folder)
    pid, start, namespace = (folder / OWNER_FILE).read_text().split()
    assert not owner_gone(folder)
    (folder / OWNER_FILE).write_text(f"{pid} {int(start) - 1} {namespace}\n")  # same pid, earlier
    assert owner_gone(folder)


def _wait_until_stopped(pid: int) -> None:
    """Popen returns once the child's descriptors are closed on exec, before the kernel has set its
    command line: until it stops (after exec), /proc/PID/cmdline may not name the folder yet. A
    judge's stopped sandbox has long finished its exec."""
    import time

    deadline = time.monotonic() + 10
    while (stat_fields(pid) or [b"gone"])[0] != b"T":
        assert time.monotonic() < deadline, f"process {pid} did not stop"
        time.sleep(0.001)


def test_a_stopped_sandbox_of_a_dead_run_is_killed_with_its_folder(tmp_path: Path) -> None:
    """A sandbox started without namespaces and stopped by its judge (a spare paused while the
    judge timed) before it could ask to die with it: the judge killed, it would sleep forever."""
    import os
    import signal

    temp = tmp_path / "tmp"
    dead = _folder(temp, "kernelarena-workers-dead")
    _owned_by_a_dead_process(dead)
    stopped = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", str(dead / "sandbox-1")]
    )
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        _wait_until_stopped(stopped.pid)
        sweep(temp, tmp_path / "shm")
        assert stopped.wait(timeout=10) == -signal.SIGKILL
        assert bystander.poll() is None
    finally:
        stopped.kill()
        bystander.kill()
