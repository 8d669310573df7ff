"""What the engine's processes (the judge, a sandbox, the zygote) do with their output and their
device at start, and how the judge reads what they wrote: below every one of them, so that none
imports another for it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The most of a process's log the judge reads for a trace.
LOG_TAIL = 6000


def redirect_output(log_path: str) -> None:
    """Point file descriptors 1 and 2 at the log, so output from C and CUDA code is kept too."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    line_buffered_output()


def line_buffered_output() -> None:
    """Python's output on descriptors 1 and 2, a line at a time, so a crash loses none of it."""
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def read_tail(path: str, limit: int = LOG_TAIL, since: int = 0) -> str:
    """At most the last ``limit`` bytes of the file at ``path`` from offset ``since`` on: never
    more, however much a sandbox wrote."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(since, size - limit))
            return handle.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""


def make_cuda_context(device_name: str) -> None:
    """The device's CUDA context, made while the main thread imports torch (1.1-2.9 s on an H200
    machine; the driver's initialisation releases the GIL): torch then finds the primary context
    made (0.13-0.16 s otherwise, after the import). Best effort: a failure here leaves the work to
    torch, which reports it. (Triton's compile-cache key is warmed where Triton runs: in the
    sandboxes.)"""
    try:
        import ctypes

        driver = ctypes.CDLL("libcuda.so.1")
        index = int(device_name.partition(":")[2] or 0)
        device, context = ctypes.c_int(), ctypes.c_void_p()
        if driver.cuInit(0) == 0 and driver.cuDeviceGet(ctypes.byref(device), index) == 0:
            driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
    except Exception:  # no driver library here: torch says so itself
        pass
