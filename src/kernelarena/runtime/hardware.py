"""The hardware a process runs on, one identity for the judge and apply: the model's name as
traces record it (``hardware_name``), the library versions beside it (``describe``), and GPU models as
apply compares them: compute capability, SM count, memory bandwidth.

A GPU without traces of its own borrows those of the nearest measured model of the same
architecture (``borrow.py``). The traces record a model's name and its measured copy bandwidth
(``environment.ceilings["copy_gbps"]``) but not its compute capability or SM count, so those come
from ``KNOWN_GPUS`` by name, or from the environment's ``compute_capability`` ("9.0") and
``sm_count`` fields where an evaluator records them. The device at hand is described by torch.

Bandwidths are compared on the scale of the measured copy: a datasheet (or memory clock) figure
is multiplied by ``COPY_FRACTION``, the share of it a copy reached on the H200 (4230 of 4800
GB/s), so that a model known only by its datasheet is not placed further from a measured one than
it is.
"""

from __future__ import annotations

import math
import platform
import re
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import torch

COPY_FRACTION = 0.88
_LIBRARIES = ("torch", "triton", "apache-tvm-ffi", "liger-kernel", "numpy", "kernelarena")


def hardware_name(device: torch.device) -> str:
    """The model's name as traces record it: torch's for a GPU, the processor's for the CPU."""
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
    """What a trace says about where it ran: hardware, library versions, device, ceilings."""
    return {
        "hardware": hardware_name(device),
        "libs": library_versions(),
        "device": str(device),
        "ceilings": ceilings,
    }


# (pattern in torch.cuda.get_device_name, compute capability, SMs, datasheet memory GB/s); the
# first match wins, so variants come before their family's plain name.
KNOWN_GPUS: tuple[tuple[str, tuple[int, int], int | None, float], ...] = (
    (r"\bGH200\b", (9, 0), 132, 4000.0),
    (r"\bH200\b", (9, 0), 132, 4800.0),
    (r"\bH100\b.*\bPCIe\b", (9, 0), 114, 2000.0),
    (r"\bH100\b.*\bNVL\b", (9, 0), 132, 3900.0),
    (r"\bH100\b", (9, 0), 132, 3350.0),  # SXM: "NVIDIA H100 80GB HBM3"
    (r"\bH800\b.*\bPCIe\b", (9, 0), 114, 2000.0),
    (r"\bH800\b", (9, 0), 132, 3350.0),
    (r"\bH20\b", (9, 0), 78, 4000.0),
    (r"\bA100\b.*\b40GB\b", (8, 0), 108, 1555.0),
    (r"\bA100\b.*\bPCIe\b", (8, 0), 108, 1935.0),
    (r"\bA100\b", (8, 0), 108, 2039.0),
    (r"\bA30\b", (8, 0), 56, 933.0),
    (r"\bA10G\b", (8, 6), 80, 600.0),
    (r"\bA10\b", (8, 6), 72, 600.0),
    (r"\bA40\b", (8, 6), 84, 696.0),
    (r"\bRTX 3090\b", (8, 6), 82, 936.0),
    (r"\bL40S?\b", (8, 9), 142, 864.0),
    (r"\bL4\b", (8, 9), 58, 300.0),
    (r"\bRTX 4090\b", (8, 9), 128, 1008.0),
    (r"\bRTX 6000 Ada\b", (8, 9), 142, 960.0),
    (r"\bG?B300\b", (10, 3), None, 8000.0),
    (r"\bG?B200\b", (10, 0), None, 8000.0),
    (r"\bRTX 5090\b", (12, 0), 170, 1792.0),
    (r"\bRTX PRO 6000 Blackwell\b", (12, 0), 188, 1792.0),
)


def architecture(capability: tuple[int, int] | None) -> str | None:
    """Models of one architecture run each other's kernels at comparable speed. Ada (8.9) is not
    Ampere (8.0, 8.6); datacenter Blackwell (10.x) and the RTX parts (12.x) differ in their tensor
    cores and memory, so they are apart too."""
    if capability is None:
        return None
    major, minor = capability
    if major == 8:
        return "Ada" if minor == 9 else "Ampere"
    named = {7: "Volta/Turing", 9: "Hopper", 10: "Blackwell", 11: "Blackwell", 12: "Blackwell RTX"}
    return named.get(major, f"sm_{major}x")


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    compute_capability: tuple[int, int] | None = None
    sm_count: int | None = None
    copy_gbps: float | None = None  # measured, or a datasheet figure times COPY_FRACTION

    @property
    def architecture(self) -> str | None:
        return architecture(self.compute_capability)

    def describe(self) -> str:
        capability = self.compute_capability
        parts = [self.architecture or "unknown architecture"]
        if capability is not None:
            parts.append(f"sm_{capability[0]}{capability[1]}")
        if self.sm_count:
            parts.append(f"{self.sm_count} SMs")
        if self.copy_gbps:
            parts.append(f"copy {self.copy_gbps:.0f} GB/s")
        return ", ".join(parts)


def profile_from_name(name: str) -> HardwareProfile:
    """What the name tells (``KNOWN_GPUS``); a name not in the table has an unknown architecture."""
    for pattern, capability, sms, gbps in KNOWN_GPUS:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return HardwareProfile(name, capability, sms, gbps * COPY_FRACTION)
    return HardwareProfile(name)


def device_profile(device: torch.device, name: str | None = None) -> HardwareProfile:
    """The device at hand: its name (``hardware_name`` unless given), torch's properties, the name
    table for what they lack."""
    name = name or hardware_name(device)
    known = profile_from_name(name)
    if device.type != "cuda":
        return HardwareProfile(name)
    properties = torch.cuda.get_device_properties(device)
    clock_khz = getattr(properties, "memory_clock_rate", 0) or 0
    bus_bits = getattr(properties, "memory_bus_width", 0) or 0
    # Double data rate: two transfers per memory clock over the bus.
    datasheet_gbps = 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9
    return HardwareProfile(
        name,
        (properties.major, properties.minor),
        properties.multi_processor_count or known.sm_count,
        datasheet_gbps * COPY_FRACTION if datasheet_gbps > 0 else known.copy_gbps,
    )


def recorded_profile(name: str, environments: Iterable[Any]) -> HardwareProfile:
    """A measured model from the environments of its traces: the median copy ceiling they
    recorded, and the compute capability and SM count where recorded, else from the name."""
    known = profile_from_name(name)
    copies, capability, sms = [], known.compute_capability, known.sm_count
    for environment in environments:
        copy = (getattr(environment, "ceilings", None) or {}).get("copy_gbps")
        if copy:
            copies.append(float(copy))
        recorded = getattr(environment, "compute_capability", None)
        if recorded:
            major, _, minor = str(recorded).partition(".")
            capability = (int(major), int(minor or 0))
        sms = getattr(environment, "sm_count", None) or sms
    copy_gbps = statistics.median(copies) if copies else known.copy_gbps
    return HardwareProfile(name, capability, sms, copy_gbps)


def _distance(target: HardwareProfile, other: HardwareProfile) -> float:
    """Sum of |log2| ratios of the bandwidths and of the SM counts, where both sides know them."""
    total = 0.0
    for mine, theirs in ((target.copy_gbps, other.copy_gbps), (target.sm_count, other.sm_count)):
        if mine and theirs:
            total += abs(math.log2(float(mine) / float(theirs)))
    return total


def donors(target: HardwareProfile, measured: Sequence[HardwareProfile]) -> list[HardwareProfile]:
    """Measured models that may stand in for ``target``, nearest first: the same architecture
    only; an equal compute capability first, then the nearest bandwidth and SM count."""
    if target.architecture is None:
        return []
    same = [m for m in measured if m.name != target.name and m.architecture == target.architecture]
    return sorted(
        same,
        key=lambda m: (
            m.compute_capability != target.compute_capability,
            _distance(target, m),
            m.name,
        ),
    )
