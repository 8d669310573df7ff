"""Sandboxes forked from one template process, so that torch is imported once per worker.

A CPU sandbox spent about 2 s of a core importing torch before serving its one solution; a run of
the built-in library starts over a hundred, and on a two-core machine that was most of
``kernelarena run``'s time. The zygote starts inside a sandbox's walls (``isolation``, with
``CAP_SYS_ADMIN`` and ``CAP_SETPCAP`` kept in its user namespace for the forks' set-up alone),
imports what a sandbox imports (``prepare_forks``), runs no solution code, and forks one sandbox
per request of its judge. On a GPU it also imports Triton and computes its cache key once, which its
forks inherit, but only after the judge's first forks (``main``): those are what the run's first
job waits for, and each does both itself if its solution may use Triton, beside its build and
checks. Each fork, before anything of its solution exists:

- leaves the zygote's PID and mount namespaces for new ones of its own, as PID 1 (its first
  process, the zygote's child, waits for it and exits with its status): when it dies the kernel
  kills everything it started, and it sees no other process;
- mounts its own ``/proc`` and ``/dev/shm`` (and ``/tmp``, where nothing it needs is mounted
  beneath the zygote's; else Landlock keeps it from writing there), and hides the judge's folder
  of sandbox logs and temporary folders but for its own temporary folder;
- then raises the layers every sandbox raises (``confine.confine_sandbox``): no capabilities,
  ``no_new_privs``, Landlock, seccomp (which refuses further namespaces and mounts), limits.

On a GPU the zygote never touches CUDA (a context does not survive a fork): each fork makes its
own context, before it confines itself (the driver's initialisation fails under Landlock), in a
few tenths of a second where a sandbox started as a program spends seconds importing torch first.
A fork whose context cannot be made exits as ``FORK_FAILED``, and the judge starts its sandboxes
as programs from then on. Sandboxes are not forked where the walls cannot stand.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from kernelarena.evaluate.sandbox.confine import confine_sandbox, die_with_parent
from kernelarena.evaluate.sandbox.descriptors import receive_fds

_CLONE_NEWNS, _CLONE_NEWPID = 0x00020000, 0x20000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8
_MS_REC, _MS_PRIVATE = 16384, 1 << 18
# open_tree(2) and move_mount(2) (Linux 5.2; the same numbers on x86-64 and arm64): a folder's
# subtree cloned as a detached mount, and that mount put in place.
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _AT_FDCWD = 428, 429, -100
_OPEN_TREE_FLAGS = 1 | os.O_CLOEXEC | 0x8000  # OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_RECURSIVE
# The capabilities the zygote's walls keep for the forks' own namespaces and mounts.
CAPABILITIES = ("CAP_SYS_ADMIN", "CAP_SETPCAP")
FORK_FAILED = 71  # the exit status of a fork whose walls could not be raised


class _Libc:
    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)

    def call(self, name: str, *arguments: Any) -> None:
        if getattr(self.libc, name)(*arguments) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"{name}{arguments[:2]}: {os.strerror(error)}")

    def syscall(self, name: str, number: int, *arguments: Any) -> int:
        result = int(self.libc.syscall(number, *arguments))
        if result < 0:
            error = ctypes.get_errno()
            raise OSError(error, f"{name}: {os.strerror(error)}")
        return result

    def mount(
        self, source: str | None, target: str, kind: str | None, flags: int, data: str = ""
    ) -> None:
        encoded = [None if v is None else v.encode() for v in (source, target, kind)]
        self.call("mount", *encoded, ctypes.c_ulong(flags), data.encode() if data else None)


def _own_mounts(libc: _Libc, tmp: Path, hidden: Path | None, tmpfs_bytes: int) -> None:
    """The fork's view, in its own mount namespace: its /proc and /dev/shm, a /tmp of its own
    unless something it needs is bound beneath the zygote's (a cache, an import path), and of the
    judge's folder ``hidden`` only its own temporary folder ``tmp``."""
    libc.mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    libc.mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    size = f"size={tmpfs_bytes},mode=1777"
    if os.path.isdir("/dev/shm"):
        libc.mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, size)
    if hidden is not None and tmp.is_relative_to(hidden) and tmp != hidden:
        # Its own folder, detached (a clone of the subtree), put back once the rest is covered.
        own = libc.syscall(
            "open_tree", _SYS_OPEN_TREE, _AT_FDCWD, str(tmp).encode(), _OPEN_TREE_FLAGS
        )
        try:
            libc.mount("tmpfs", str(hidden), "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=755")
            tmp.mkdir(parents=True)
            libc.syscall("move_mount", _SYS_MOVE_MOUNT, own, b"", _AT_FDCWD, str(tmp).encode(), 4)
        finally:
            os.close(own)
    if not _mounts_beneath("/tmp"):
        libc.mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, size)


def _mounts_beneath(folder: str) -> bool:
    """Whether anything is mounted below ``folder`` (a mount over it would hide it)."""
    with open("/proc/self/mountinfo") as mounts:
        points = [line.split()[4] for line in mounts]
    return any(point.startswith(folder.rstrip("/") + "/") for point in points)


def _sandbox(conn_fd: int, device_name: str, tmp: Path, writable: list[str], keyed: bool) -> None:
    """The fork's second process, PID 1 of its namespace: the sandbox itself. Never returns.
    ``keyed``: whether it inherited Triton's cache key; if not, it computes it as a judge's first
    sandbox does (``server.serve``)."""
    import tempfile

    from kernelarena.evaluate.sandbox.server import serve

    die_with_parent()
    os.environ.update(TMPDIR=str(tmp), HOME=str(tmp))
    # What the zygote's imports found is hidden here (Triton's CUDA driver compiles its helper
    # in a temporary folder on first use): the fork's own folder from now on.
    tempfile.tempdir = None
    os.chdir(tmp)
    if device_name.startswith("cuda"):
        _cuda_context(device_name)
    confinement = confine_sandbox(writable)
    serve(Connection(conn_fd), device_name, writable, confinement, first=not keyed)


def _cuda_context(device_name: str) -> None:
    """The fork's CUDA context, made before it confines itself; else it ends as ``FORK_FAILED``
    (nothing of a solution exists yet), and the judge starts sandboxes as programs instead."""
    import torch

    try:
        device = torch.device(device_name)
        torch.cuda.set_device(device)
        torch.cuda.synchronize(device)
    except Exception as error:
        print(f"kernelarena sandbox fork: no CUDA context: {error!r}", flush=True)
        os._exit(FORK_FAILED)


def _fork(request: dict[str, Any], conn_fd: int, device_name: str, keyed: bool) -> None:
    """The zygote's child: its own namespaces and view, then the sandbox as its child, whose
    status it exits with (128 + the signal that killed it, as bwrap's init does)."""
    from kernelarena.evaluate.sandbox.isolation import TMPFS_BYTES

    die_with_parent()
    tmp, writable = Path(request["tmp"]), list(request["writable"])
    hidden = Path(request["hidden"]) if request.get("hidden") else None
    libc = _Libc()
    try:
        libc.call("unshare", _CLONE_NEWNS | _CLONE_NEWPID)
    except OSError as error:
        print(f"kernelarena sandbox fork: {error}", flush=True)
        os._exit(FORK_FAILED)
    child = os.fork()
    if child == 0:
        try:
            _own_mounts(libc, tmp, hidden, TMPFS_BYTES)
            _sandbox(conn_fd, device_name, tmp, writable, keyed)
        except BaseException as error:
            print(f"kernelarena sandbox fork: {error!r}", flush=True)
        os._exit(FORK_FAILED)
    os.close(conn_fd)
    # This process runs no solution code: it only holds the namespace's first process.
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def _reap_ended(forks: set[int], watched: set[int]) -> None:
    """Reap the forks that ended and that the judge no longer watches: it reads a fork's status
    from /proc while the fork is a zombie (``sandboxes.ForkedProcess``)."""
    for pid in list(forks - watched):
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                continue
        forks.discard(pid)


def prepare_forks(device_name: str, with_triton: bool = True) -> None:
    """What every fork would otherwise do itself, done here once before the first: torch's,
    kernelarena's and (``with_triton``) Triton's imports."""
    on_gpu = device_name.startswith("cuda")
    if not on_gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported
    # The server and what a sandbox's first requests import (its sets, timings, graphs; a
    # reference's runs: 20-30 ms a fork, on the way of each solution's first job). None of them
    # touches CUDA as it loads.
    import torch  # noqa: F401

    import kernelarena.compile
    import kernelarena.evaluate.sandbox.arena
    import kernelarena.evaluate.sandbox.graph_timing
    import kernelarena.evaluate.sandbox.reference_serving
    import kernelarena.evaluate.sandbox.server
    import kernelarena.evaluate.sandbox.stream_order
    import kernelarena.evaluate.sandbox.timing  # noqa: F401

    if with_triton:
        with contextlib.suppress(ImportError):
            import triton  # noqa: F401


def _key_triton(forked: int) -> None:
    """Triton's compile-cache key computed, for the forks from now on to inherit (said in the
    log, with its time)."""
    from kernelarena.evaluate.sandbox.triton_warmth import warm_triton

    started = time.perf_counter()
    warm_triton()
    took = time.perf_counter() - started
    print(f"kernelarena sandbox zygote: Triton's cache key in {took:.2f} s, after {forked} forks")


def main(argv: list[str]) -> None:
    """``argv``: the control connection's descriptor, the device, and on a GPU how many forks to
    make before computing Triton's compile-cache key (``warm_triton``: a hash of its ~480 MB
    library, 0.4-0.6 s of a core on an H100 host) for every later fork to inherit (each computed
    it again before it said it was ready, every new sandbox waiting on it); 0: before the first.
    The forks made before it compute it themselves where their solution may use Triton, and
    import Triton too: the zygote imports it with the key."""
    control_fd, device_name = int(argv[0]), argv[1]
    key_triton_after = int(argv[2]) if len(argv) > 2 else 0
    from kernelarena.evaluate.process_output import line_buffered_output

    line_buffered_output()
    die_with_parent()
    control = Connection(control_fd)
    on_gpu = device_name.startswith("cuda")  # the CPU's interpreter has no cache key
    # Triton's import (0.15-0.3 s) waits with its key: the first forks, which the run's first job
    # waits for, import it themselves where their solution may use Triton (``warm_triton``).
    prepare_forks(device_name, with_triton=not on_gpu or key_triton_after <= 0)
    if on_gpu and key_triton_after <= 0:
        _key_triton(0)
    print(f"kernelarena sandbox zygote on {device_name}", flush=True)
    control.send_bytes(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    forks: set[int] = set()
    forked = 0
    while True:
        try:
            request = control.recv()  # from the judge, the trusted side
        except (EOFError, OSError):
            os._exit(0)
        _reap_ended(forks, set(request.get("watched", ())))
        conn_fd, log_fd = receive_fds(control, 2)
        pid = os.fork()
        if pid == 0:
            try:
                control.close()
                os.dup2(log_fd, 1)
                os.dup2(log_fd, 2)
                os.close(log_fd)
                _fork(request, conn_fd, device_name, not on_gpu or forked >= key_triton_after)
            finally:
                os._exit(FORK_FAILED)
        forks.add(pid)
        os.close(conn_fd)
        os.close(log_fd)
        control.send_bytes(json.dumps({"pid": pid}).encode())
        forked += 1
        if on_gpu and forked == key_triton_after:
            # The judge's next request (a spare, as its first job takes a sandbox) waits for this.
            _key_triton(forked)


if __name__ == "__main__":
    main(sys.argv[1:])
