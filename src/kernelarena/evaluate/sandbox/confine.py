"""What the operating system can do to keep a solution's process away from its judge.

The sandbox confines itself before any solution code is imported: Landlock (Linux 5.13+) takes away
the right to create, write, truncate or delete files outside the folders a build needs (its own
temporary folder, the build caches, ``/dev``), to ptrace or read the memory of processes outside
it, and (Landlock ABI 6+) to signal them; the parent-death signal kills it with its judge. The judge
makes itself undumpable (no ``/proc/<pid>/mem`` for its peers) and a child subreaper, so that a
process the solution forks and orphans becomes the judge's child, where ``descendants`` finds it.
Every step is best effort on kernels without the feature, and ``describe`` says what holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from kernelarena.evaluate.sandbox import seccomp

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
# /proc/PID/stat's flags, counted from the state as ``stat_fields`` returns them, and the flag of a
# process that has begun to exit (include/linux/sched.h).
_STAT_FLAGS = 6
_PF_EXITING = 0x4
_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1

# Landlock file-system rights that change the file system; reading and executing stay open. ABI 1:
# WRITE_FILE and REMOVE_DIR through MAKE_SYM (bits 1, 4-12); ABI 2 adds REFER, ABI 3 TRUNCATE.
_WRITE_RIGHTS_BY_ABI = {1: (1 << 1) | sum(1 << bit for bit in range(4, 13)), 2: 1 << 13, 3: 1 << 14}
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
_SCOPE_SIGNAL = 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 without Landlock."""
    try:
        version = int(_libc().syscall(_SYS_LANDLOCK_CREATE_RULESET, None, 0, 1))
    except (OSError, AttributeError):
        return 0
    return max(version, 0)


def confine_writes(writable: Iterable[str | Path]) -> str:
    """Allow file-system changes only beneath ``writable`` for this process and its children, for
    good; also scopes ptrace and (ABI 6+) signals to them. Returns what holds, for the log."""
    abi = landlock_abi()
    if abi < 1:
        return "no Landlock in this kernel: file writes are not confined"
    libc = _libc()
    rights = 0
    for version, bits in _WRITE_RIGHTS_BY_ABI.items():
        if abi >= version:
            rights |= bits
    scoped = (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0
    attr = _RulesetAttr(rights, 0, scoped)
    # Older kernels take the larger struct as long as the fields they do not know are zero.
    size = ctypes.sizeof(_RulesetAttr)
    ruleset = int(libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size, 0))
    if ruleset < 0:
        return f"Landlock refused a ruleset: {os.strerror(ctypes.get_errno())}"
    try:
        for folder in writable:
            try:
                fd = os.open(str(folder), os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a cache folder that does not exist yet cannot be written either
            try:
                rule = _PathBeneathAttr(rights, fd)
                libc.syscall(
                    _SYS_LANDLOCK_ADD_RULE,
                    ruleset,
                    _LANDLOCK_RULE_PATH_BENEATH,
                    ctypes.byref(rule),
                    0,
                )
            finally:
                os.close(fd)
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if int(libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0)) != 0:
            return f"Landlock refused to restrict: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(ruleset)
    signals = ", signals" if scoped else ""
    return f"Landlock ABI {abi}: writes confined, ptrace{signals} scoped"


_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAPABILITY_VERSION_3 = 0x20080522
# A file a sandbox writes (its log included) stops growing here: SIGXFSZ, or EFBIG where caught.
FILE_BYTES = 1 << 30


def drop_capabilities() -> str:
    """No capabilities now, none to regain by running a program (the bounding set emptied): a
    sandbox started as root keeps root's file ownership, not root's powers. Returns what holds."""
    libc = _libc()
    for capability in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() == 22:
            break  # EINVAL: past the last capability this kernel knows
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    libc.capset(header, (ctypes.c_uint32 * 6)())
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    held = _status_fields("CapEff", "CapPrm", "CapBnd")
    if os.geteuid() != 0:
        # Without root, and with no_new_privs, the bounding set grants nothing on exec.
        held.pop("CapBnd", None)
    if all(int(value, 16) == 0 for value in held.values()):
        return "no capabilities"
    return "capabilities remain (" + ", ".join(f"{k} {v}" for k, v in held.items()) + ")"


def _status_fields(*names: str) -> dict[str, str]:
    found = {}
    with contextlib.suppress(OSError), open("/proc/self/status") as handle:
        for line in handle:
            name, _, value = line.partition(":")
            if name in names:
                found[name] = value.strip()
    return found


def limit_resources(file_bytes: int) -> str:
    """No file written past ``file_bytes`` (the log is one), no core dumps (a CUDA process's core
    is its whole address space)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return f"files up to {file_bytes >> 20} MiB"


def confine_sandbox(writable: Iterable[str | Path]) -> str:
    """Every layer a sandbox raises inside its walls (``isolation``), before solution code
    loads: resource limits, no capabilities, Landlock, seccomp. Returns what holds."""
    file_bytes = int(os.environ.get("KERNELARENA_SANDBOX_FILE_BYTES", FILE_BYTES))
    held = [limit_resources(file_bytes), drop_capabilities(), confine_writes(writable)]
    if os.environ.get("KERNELARENA_SECCOMP") == "0":  # a diagnostic: what the filter costs
        held.append("NO seccomp filter: KERNELARENA_SECCOMP=0")
    else:
        held.append(seccomp.load())
    return "; ".join(held)


def die_with_parent() -> None:
    """SIGKILL this process when the one that started it exits."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def guard_judge() -> None:
    """Undumpable (same-user processes cannot read its memory through /proc) and a subreaper (a
    process a solution forks and orphans becomes its child, so ``descendants`` finds it)."""
    try:
        libc = _libc()
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def stat_fields(pid: int | str) -> list[bytes] | None:
    """/proc/PID/stat after the command: [state, ppid, ...] (the command may hold spaces and
    parentheses); None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = stat_fields(entry.name)
        if fields is not None and len(fields) > 1 and fields[0] != b"Z":
            parents[int(entry.name)] = int(fields[1])
    return parents


def _children_files() -> bool:
    """Whether this kernel lists each thread's children (/proc/PID/task/TID/children)."""
    pid = os.getpid()
    return os.path.exists(f"/proc/{pid}/task/{pid}/children")


_HAS_CHILDREN_FILES = _children_files()


def _children(pid: int) -> list[int]:
    """Live (not zombie) children of ``pid``: read from its threads' lists, far cheaper than
    reading every process's stat (a judge asks after every job)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as handle:
                found += [int(child) for child in handle.read().split()]
        except OSError:
            continue
    return [child for child in found if not _zombie(child)]


def _zombie(pid: int) -> bool:
    fields = stat_fields(pid)
    return not fields or fields[0] == b"Z"  # gone, or a zombie


def descendants(root: int) -> list[int]:
    """Live (not zombie) processes below ``root``."""
    children_of: Callable[[int], list[int]] = _children
    if not _HAS_CHILDREN_FILES:
        try:
            parents = _parents()
        except OSError:
            return []
        table: dict[int, list[int]] = {}
        for pid, parent in parents.items():
            table.setdefault(parent, []).append(pid)
        children_of = lambda pid: table.get(pid, [])  # noqa: E731
    found: list[int] = []
    frontier = list(children_of(root))
    while frontier:
        pid = frontier.pop()
        found.append(pid)
        frontier += children_of(pid)
    return found


def kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def stop_tree(root: int, patience_s: float) -> list[int]:
    """SIGSTOP ``root`` and every process below it; the processes signalled, ``root`` first.
    Each round signals what the last walk found new, waits until those have stopped, and walks
    again, until a walk finds nothing new: a process stops only between system calls, so one
    caught inside ``fork`` still adds its child, which a walk made before it stopped misses.
    Waits ``patience_s`` at most in all (a process in uninterruptible sleep stops late); past
    that, the rounds go on without waiting."""
    signalled: list[int] = []
    fresh = [root]
    deadline = time.monotonic() + patience_s
    while fresh:
        for pid in fresh:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        signalled += fresh
        while any(running(pid) for pid in fresh) and time.monotonic() < deadline:
            time.sleep(0.0005)
        seen = set(signalled)
        fresh = [pid for pid in descendants(root) if pid not in seen]
    return signalled


def running(pid: int) -> bool:
    """Whether ``pid`` exists and is neither stopped, a zombie nor exiting (a process tearing
    down a CUDA context takes tenths of a second to become a zombie, and never stops)."""
    fields = stat_fields(pid)
    if not fields or len(fields) <= _STAT_FLAGS:
        return False
    return fields[0] not in (b"T", b"t", b"Z", b"X") and not int(fields[_STAT_FLAGS]) & _PF_EXITING


def kill_tree(root: int) -> None:
    """SIGKILL ``root`` and every process below it. Stopped first: a tree killed as it is walked
    loses its shape (orphans leave ``root``'s subtree) before a later walk could find a child
    forked in the meantime."""
    below = stop_tree(root, patience_s=1.0)[1:]
    kill_all([*below, root])
