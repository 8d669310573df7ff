"""Which devices are here, found without importing torch in the parent process (it costs seconds)."""

from __future__ import annotations

import os
import shutil
import subprocess


def visible_gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [e for e in visible.split(",") if e.strip()]
        if not entries or entries[0].strip() == "-1":
            return 0
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        listed = subprocess.run(
            [smi, "-L"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    count = sum(1 for line in listed.splitlines() if line.startswith("GPU "))
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
