"""What travels between the Ray executor's driver and its actors besides a job's payload
(``jobs.Job.payload``, ``JobResult.payload``): the run's builds for each actor's pool and, at the
end, what the pools did; and the safetensors files of workloads that load their inputs from a
dataset folder, which go through Ray's object store once per file and are written out again on
the actor's node."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelarena.data import SafetensorsInput
from kernelarena.evaluate.executors.build_targets import pooled
from kernelarena.evaluate.executors.jobs import Job


def build_requests(jobs: Sequence[Job]) -> list[dict[str, Any]]:
    """Each compiled solution of ``jobs`` once, with its definition, in the order of the jobs
    (``EvaluationHost.prebuild``)."""
    seen: set[tuple[str, str]] = set()
    requests = []
    for job in jobs:
        key = (job.definition.name, job.solution.name)
        if pooled(job.solution) and key not in seen:
            seen.add(key)
            requests.append(
                {
                    "definition": job.definition.to_json_dict(),
                    "solution": job.solution.to_json_dict(),
                }
            )
    return requests


class ShippedBlobs:
    """The driver's side: object refs of the safetensors files jobs read, each put once."""

    def __init__(self, ray: Any) -> None:
        self._ray = ray
        self._refs: dict[tuple[str, str], Any] = {}

    def for_job(self, job: Job) -> dict[str, Any]:
        """The refs of ``job``'s files, by their path inside its dataset folder."""
        if job.blob_root is None:
            return {}
        blobs: dict[str, Any] = {}
        for given in job.workload.inputs.values():
            if not isinstance(given, SafetensorsInput):
                continue
            key = (str(job.blob_root), given.path)
            if key not in self._refs:
                source = job.blob_root / given.path
                if not source.is_file():
                    continue  # the judge reports the missing file in the job's trace
                self._refs[key] = self._ray.put(source.read_bytes())
            blobs[given.path] = self._refs[key]
        return blobs


def materialize(ray: Any, folder: Path, origin: str | None, blobs: dict[str, Any]) -> Path:
    """The actor's side: shipped files written under ``folder``, in a folder named after the
    dataset they came from (``origin``); that folder, the job's blob root here."""
    root = folder / hashlib.sha256(str(origin).encode()).hexdigest()[:16]
    for relative, ref in blobs.items():
        target = root / relative
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".partial")
            partial.write_bytes(ray.get(ref))
            os.replace(partial, target)
    return root


def merged_summaries(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Several pools' ``summary`` as one (the Ray executor's actors each have a pool): counts and
    busy time added, the longest wall and build kept, and ``pools``, how many there were."""
    found = [s for s in summaries if s]
    if not found:
        return {}
    counts: dict[str, int] = {}
    for summary in found:
        for status, count in summary["by_status"].items():
            counts[status] = counts.get(status, 0) + count
    return {
        "pools": len(found),
        "slots": sum(s["slots"] for s in found),
        "builds": sum(s["builds"] for s in found),
        "by_status": counts,
        "cached_failures": sum(s["cached_failures"] for s in found),
        "wall_s": max(s["wall_s"] for s in found),
        "busy_s": round(sum(s["busy_s"] for s in found), 3),
        "longest_s": max(s["longest_s"] for s in found),
    }
