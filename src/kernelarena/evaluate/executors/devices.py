"""Which devices are here, found without importing torch in the parent process (it costs seconds)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from typing import NamedTuple


class Gpu(NamedTuple):
    number: int  # as nvidia-smi numbers it
    compute_capability: str  # '9.0'
    memory_mib: int


@functools.cache
def host_gpus() -> tuple[Gpu, ...]:
    """This host's GPUs as nvidia-smi lists them, in one query for the process: the parent asks
    for their count, their architecture (the build target) and the smallest one's memory (the
    plan), each ask a process of tens of milliseconds, most of them before the run's first job.
    Empty where nvidia-smi is missing or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        listed = subprocess.run(
            [smi, "--query-gpu=index,compute_cap,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
        rows = [[field.strip() for field in line.split(",")] for line in listed.splitlines()]
        return tuple(Gpu(int(row[0]), row[1], int(row[2])) for row in rows if len(row) == 3)
    except (OSError, subprocess.SubprocessError, ValueError):
        return ()


def visible_gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [e for e in visible.split(",") if e.strip()]
        if not entries or entries[0].strip() == "-1":
            return 0
    count = len(host_gpus())
    return min(count, len(entries)) if visible is not None else count


def resolve_devices(requested: str | None) -> list[str]:
    """``None``/'auto': every visible GPU, else the CPU. 'cuda' is every GPU; 'cuda:0,cuda:1' a list."""
    if requested in (None, "", "auto"):
        count = visible_gpu_count()
        return [f"cuda:{i}" for i in range(count)] if count else ["cpu"]
    if requested == "cuda":
        count = visible_gpu_count()
        if not count:
            raise ValueError("--device cuda: no GPU is visible here")
        return [f"cuda:{i}" for i in range(count)]
    devices = [d.strip() for d in requested.split(",") if d.strip()]
    for device in devices:
        if device != "cpu" and not (device.startswith("cuda:") and device[5:].isdigit()):
            raise ValueError(f"--device: '{device}' is not 'cpu', 'cuda' or 'cuda:N'")
        if device != "cpu" and devices.count(device) > 1:
            # Two workers timing on one GPU disturb each other's numbers ('cpu,cpu' is a dry run).
            raise ValueError(f"--device: '{device}' is listed twice")
    return devices
