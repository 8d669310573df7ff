"""What the build pool builds for (a CPU, or a GPU architecture read without a CUDA context) and
how many builds it runs at once: the cores the judges leave free, within the memory available.
"""

from __future__ import annotations

import contextlib
import os

from kernelarena.data import Language, Solution
from kernelarena.evaluate.executors.devices import host_gpus

# What one build may take at its peak: nvcc's cicc on a CUTLASS-style template kernel reaches
# 2-3 GB, the host compiler on torch/extension.h about 1 GB.
BUILD_BYTES = 3 << 30
_POOLED = (Language.CUDA, Language.CPP)


def pooled(solution: Solution) -> bool:
    """Whether the pool builds ``solution`` (compiled languages); the others are ready at once."""
    return solution.spec.language in _POOLED


def pool_slots(devices: int = 1) -> int:
    """Builds at once: the cores the ``devices`` judges (and their sandboxes) leave free, within
    the memory available at ``BUILD_BYTES`` a build; at least one."""
    configured = os.environ.get("KERNELARENA_BUILD_SLOTS")
    if configured:
        return max(1, int(configured))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    by_memory = available_memory() // BUILD_BYTES
    return max(1, min(cores - 2 * devices, by_memory))


def available_memory() -> int:
    """MemAvailable of /proc/meminfo, in bytes (the page cache counts as free); else the total."""
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return BUILD_BYTES


def build_target(device: str) -> str | None:
    """What the pool builds for on ``device``: ``cpu``, or a GPU's architecture (``sm_90a``),
    read from nvidia-smi so that no process of the pool makes a CUDA context. None where that
    cannot be told (no nvidia-smi, GPUs of several architectures): the sandboxes build then."""
    if not device.startswith("cuda"):
        return "cpu"
    found = gpu_architectures()
    if len(found) != 1:
        return None
    major, _, minor = found[0].partition(".")
    return f"sm_{major}{minor}{'a' if int(major) >= 9 else ''}"  # as compile.cuda.device_arch


def gpu_architectures() -> tuple[str, ...]:
    """The compute capabilities ('9.0') of this host's GPUs, each once."""
    return tuple(sorted({gpu.compute_capability for gpu in host_gpus()}))
