"""A run's stage times (``JobResult.stages``), summed by device and shown as a table.

Per device: how many jobs carried stages, and the seconds each stage took over all of them. A
stage's path is ``phase/nested/...`` (``stage_clock``); a phase's own time is the sum over every
path under it, so the table shows phases, while the JSON keeps every path. ``idle`` is the judge's
wait between jobs, and ``parent:*`` the executor's share, which overlaps the judges' time rather
than adding to it (the parent records one trace while the worker runs the next job).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernelarena.evaluate.executors.jobs import Job, JobResult

# The judge's phases in the order a job passes through them (``stage_clock``).
PHASES = (
    "decode",
    "sandbox_start",
    "build",
    "checks",
    "timing",
    "finish",
    "reply",
)
# The stage of a job that started a sandbox (``clocked_sandboxes``).
NEW_SANDBOX = "sandbox_start/new_sandbox"


class StageTotals:
    def __init__(self) -> None:
        self.by_device: dict[str, dict[str, Any]] = {}

    def add(self, device: str, stages: dict[str, float]) -> None:
        if not stages:
            return
        entry = self.by_device.setdefault(device, {"jobs": 0, "seconds": {}, "jobs_in": {}})
        entry["jobs"] += 1
        seconds, jobs_in = entry["seconds"], entry["jobs_in"]
        for path, value in stages.items():
            seconds[path] = seconds.get(path, 0.0) + value
            jobs_in[path] = jobs_in.get(path, 0) + 1

    def as_json(self) -> dict[str, Any]:
        """``{device: {"jobs": n, "seconds": {path: total}, "mean_s": {path: per job},
        "jobs_in": {path: jobs that passed through it}}}``: ``jobs_in["sandbox_start/
        new_sandbox"]`` is how many sandboxes the device's judge started."""
        found = {}
        for device, entry in sorted(self.by_device.items()):
            jobs = max(entry["jobs"], 1)
            seconds = {path: round(v, 6) for path, v in sorted(entry["seconds"].items())}
            found[device] = {
                "jobs": entry["jobs"],
                "seconds": seconds,
                "mean_s": {path: round(v / jobs, 6) for path, v in seconds.items()},
                "jobs_in": dict(sorted(entry["jobs_in"].items())),
            }
        return found


def job_record(job: Job, result: JobResult, finished_at: float | None = None) -> dict[str, Any]:
    """One job's stages in ms (those of 0.1 ms or more), what it was and where it ran, and when
    its result reached the parent (seconds since the epoch, where given): ``kernelarena run
    --json`` lists them as ``job_stages``, so that a run's first jobs (the sandboxes and
    compilers they wait for) show apart from its steady ones."""
    record: dict[str, Any] = {
        "solution": job.solution.name,
        "workload": job.workload.uuid,
        "device": result.device,
        "axes": dict(job.workload.axes),
        "ms": {path: round(1e3 * s, 2) for path, s in sorted(result.stages.items()) if s >= 1e-4},
    }
    if finished_at is not None:
        record["finished_at"] = round(finished_at, 3)
    return record


def by_phase(values: dict[str, float]) -> dict[str, float]:
    """Values by stage path summed by their top stage: each phase with its nested stages."""
    summed: dict[str, float] = {}
    for path, value in values.items():
        top = path.split("/", 1)[0]
        summed[top] = summed.get(top, 0.0) + value
    return summed


def phase_means(entry: dict[str, Any]) -> dict[str, float]:
    """Mean seconds per job of each phase (its nested stages included), of ``idle``, of the
    judge in all (``judge``), and of each ``parent:*`` stage, from one device's ``as_json``
    entry."""
    means = by_phase(entry["mean_s"])
    means["judge"] = sum(v for k, v in means.items() if k in PHASES)
    return means


def nested_means(entry: dict[str, Any], at_least: float = 0.0005) -> dict[str, float]:
    """Mean seconds per job of each nested stage (``timing/judge_clocks``) that took at least
    ``at_least``: inclusive of the stages below it."""
    means: dict[str, float] = {}
    for path, value in entry["mean_s"].items():
        parts = path.split("/")
        for depth in range(2, len(parts) + 1):
            key = "/".join(parts[:depth])
            means[key] = means.get(key, 0.0) + value
    return {k: v for k, v in sorted(means.items()) if v >= at_least}


def stage_table(stages: dict[str, Any], label: str = "") -> list[str]:
    """Plain lines: a row per device of the mean milliseconds per job in each phase, then the
    larger nested stages of each device."""
    if not stages:
        return []
    columns = [*PHASES, "judge", "idle"]
    parents = sorted({k for e in stages.values() for k in phase_means(e) if ":" in k})
    header = ["device", "jobs", "sandboxes", *columns, *parents]
    rows = [header]
    for device, entry in stages.items():
        means = phase_means(entry)
        cells = [f"{1e3 * means.get(c, 0.0):.1f}" for c in [*columns, *parents]]
        started = entry.get("jobs_in", {}).get(NEW_SANDBOX, 0)
        rows.append([device, str(entry["jobs"]), str(started), *cells])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    title = f"ms per job by stage{f' ({label})' if label else ''}:"
    lines = [title] + ["  " + "  ".join(map(str.rjust, row, widths)) for row in rows]
    for device, entry in stages.items():
        nested = nested_means(entry)
        if nested:
            shown = ", ".join(f"{path} {1e3 * v:.1f}" for path, v in nested.items())
            lines.append(f"  {device} nested: {shown}")
    return lines
