"""The whole host's CPU time over a stretch of a run, from Linux's /proc/stat.

A scaling run's judges and sandboxes are not all children of the benchmark (sandboxes are forked
by a zygote), so their CPU time is read machine-wide: how many cores were busy on average, and how
many the hypervisor took back (steal: a vCPU ready to run that the host did not run). Where more
devices make every judge's host work slower, these tell apart work the run added (busy grows)
from a host that gave the run less (steal grows).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

# /proc/stat's "cpu" line, in its order (proc(5)); guest time is already counted in user.
_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_BUSY = ("user", "nice", "system", "irq", "softirq")


@dataclass(frozen=True)
class HostCpu:
    """A reading of the host's CPU time (seconds, all CPUs together) and when it was taken."""

    seconds: dict[str, float]
    taken_at: float

    @classmethod
    def read(cls, stat: Path = Path("/proc/stat")) -> HostCpu | None:
        """None where there is no /proc/stat (not Linux) or its first line is not the total."""
        try:
            first = stat.read_text().splitlines()[0].split()
        except (OSError, IndexError):
            return None
        if not first or first[0] != "cpu":
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        values = [int(v) / ticks for v in first[1 : 1 + len(_FIELDS)]]
        return cls(dict(zip(_FIELDS, values, strict=False)), time.monotonic())

    def since(self, before: HostCpu) -> dict[str, float]:
        """Cores in use on average between the two readings, by kind: ``busy`` (user, system,
        interrupts), ``steal``, ``idle`` (with iowait)."""
        wall = self.taken_at - before.taken_at
        if wall <= 0:
            return {}

        def cores(names: tuple[str, ...]) -> float:
            spent = sum(self.seconds.get(n, 0.0) - before.seconds.get(n, 0.0) for n in names)
            return round(spent / wall, 2)

        return {
            "wall_s": round(wall, 2),
            "busy_cores": cores(_BUSY),
            "steal_cores": cores(("steal",)),
            "idle_cores": cores(("idle", "iowait")),
        }


def describe(used: dict[str, float]) -> str:
    """'host CPU: 5.1 cores busy, 0.3 stolen' (empty without a reading)."""
    if not used:
        return ""
    return f"host CPU: {used['busy_cores']:.1f} cores busy, {used['steal_cores']:.1f} stolen"
