"""What a trace says about where it ran: hardware, library versions, device, ceilings."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Any

import torch

_LIBRARIES = ("torch", "triton", "apache-tvm-ffi", "liger-kernel", "numpy", "kernelarena")


def hardware_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU {platform.processor() or platform.machine()}".strip()


def library_versions() -> dict[str, str]:
    versions = {"python": sys.version.split()[0]}
    for name in _LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    if torch.version.cuda:
        versions["cuda"] = str(torch.version.cuda)
    return versions


def describe(device: torch.device, ceilings: dict[str, float]) -> dict[str, Any]:
    return {
        "hardware": hardware_name(device),
        "libs": library_versions(),
        "device": str(device),
        "ceilings": ceilings,
    }
