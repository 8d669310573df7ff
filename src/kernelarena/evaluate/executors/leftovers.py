"""Temporary folders of runs that were killed, found and removed by the next run on the machine.

A run removes its own folders when it ends (``LocalExecutor.close``, a Ray actor's ``shutdown``).
A process killed with SIGKILL cannot: a ``kernelarena run`` killed from outside, a Ray actor its
solution or its node took down. So every such folder carries an owner file (the creating process's
pid and start time, which tells a reused pid apart), and an executor that starts removes the
folders whose owner is gone, and kills the processes still naming them: sandboxes started without
namespaces (no bwrap here) outlive a judge killed while it held them stopped, before they could ask
to die with it. A folder without an owner file is left alone: nothing says whose it is.

The arena, the memory judge and sandboxes share, has no name (``arena``: memfds and CUDA memory
passed by descriptor), so the kernel frees it with the last process that maps it, SIGKILL or not.
Earlier releases kept it in /dev/shm folders named after the log folder; those a killed run of such a
release left are removed with their log folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

from kernelarena.evaluate.sandbox.confine import stat_fields

OWNER_FILE = ".kernelarena-owner"
PREFIXES = ("kernelarena-workers-", "kernelarena-blobs-")
SHARED_MEMORY = Path("/dev/shm")
# /proc/PID/stat fields after the command: [state, ppid, ...]; the start time is field 22 of the
# whole line (proc(5)), index 19 here.
_START_TIME = 19


def _namespace() -> str:
    """This process's pid namespace: pids of another (a container sharing /tmp) mean nothing here."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return "unknown"


def _identity(pid: int) -> str | None:
    """'PID START NAMESPACE' while the process lives (start time in clock ticks after boot), else
    None."""
    fields = stat_fields(pid)
    if fields is None or len(fields) <= _START_TIME or fields[0] == b"Z":
        return None
    return f"{pid} {fields[_START_TIME].decode()} {_namespace()}"


def mark_owner(folder: Path) -> None:
    """Record this process as the owner of ``folder``."""
    identity = _identity(os.getpid())
    if identity is not None:
        (folder / OWNER_FILE).write_text(identity + "\n")


def owner_gone(folder: Path) -> bool:
    """Whether ``folder`` has an owner file, written in this pid namespace, whose process no longer
    runs."""
    try:
        recorded = (folder / OWNER_FILE).read_text().split()
        pid, namespace = int(recorded[0]), recorded[2]
    except (OSError, ValueError, IndexError):
        return False
    return namespace == _namespace() and _identity(pid) != " ".join(recorded)


def kill_processes_naming(folder: Path) -> list[int]:
    """SIGKILL this user's processes whose command line names a path in ``folder``."""
    needle = str(folder).encode() + b"/"
    killed = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                if needle not in handle.read():
                    continue
            os.kill(int(entry.name), signal.SIGKILL)
            killed.append(int(entry.name))
        except OSError:
            continue
    return killed


def sweep(temp_root: Path | None = None, shared_memory: Path = SHARED_MEMORY) -> list[Path]:
    """Remove the folders of dead owners under ``temp_root`` (the temporary folder) and the
    /dev/shm arenas of earlier releases named after them; returns the folders removed."""
    root = temp_root or Path(tempfile.gettempdir())
    removed = []
    for prefix in PREFIXES:
        for folder in root.glob(f"{prefix}*"):
            if not folder.is_dir() or not owner_gone(folder):
                continue
            kill_processes_naming(folder)
            remove_arenas(folder, shared_memory)
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def remove_arenas(folder: Path, shared_memory: Path = SHARED_MEMORY) -> None:
    """The /dev/shm arenas earlier releases named after ``folder`` (a worker's log folder)."""
    for arena in shared_memory.glob(f"{folder.name}-arena-*"):
        shutil.rmtree(arena, ignore_errors=True)
