"""Copies of the published dataset for one tool's run: a subset of definitions, the first
workloads of each file, or only the jobs another run did not pass."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from benchmarks.published.verdicts import PASSED


def copy_dataset(
    source: Path, target: Path, first_workloads: int | None, definitions: list[str] | None
) -> Path:
    """The dataset without traces, each workloads file cut to its first lines where asked, and
    only the files of ``definitions`` where given."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("traces"))
    for folder in ("definitions", "workloads", "solutions"):
        for path in sorted((target / folder).glob("*/*")):
            if not definitions or path.name.split(".")[0] in definitions:
                continue
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
    if first_workloads is not None:
        for path in (target / "workloads").rglob("*.jsonl"):
            lines = [line for line in path.read_text().splitlines() if line.strip()]
            path.write_text("\n".join(lines[:first_workloads]) + "\n")
    return target


def failed_jobs(ours: dict[tuple[str, str], dict[str, Any]]) -> set[tuple[str, str]]:
    return {job for job, verdict in ours.items() if verdict["status"] != PASSED}


def keep_only(dataset: Path, jobs: set[tuple[str, str]]) -> None:
    """Only the solutions and workloads of ``jobs`` (the peer then runs their cross product):
    issue 37 asks about the jobs the peer passes, and where kernelarena passes, no verdict of
    the peer's can change the answer."""
    solutions, workloads = {s for s, _ in jobs}, {w for _, w in jobs}
    for path in (dataset / "solutions").rglob("*.json"):
        if json.loads(path.read_text())["name"] not in solutions:
            path.unlink()
    for path in (dataset / "workloads").rglob("*.jsonl"):
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        kept = [line for line in lines if json.loads(line)["workload"]["uuid"] in workloads]
        path.write_text("".join(f"{line}\n" for line in kept))


def unsettled_jobs(results: list[Path]) -> set[tuple[str, str]]:
    """The (solution, workload) jobs whose latest kernelarena verdict in ``results`` (earlier
    files first, a later verdict overriding) is none at all, or INCORRECT_NUMERICAL by a few
    elements (``NEAR_MISS``): what a run stopped at its limit, or a change to the judge's
    comparison, leaves to settle. A solution wrong everywhere stays settled."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for path in results:
        for row in json.loads(path.read_text())["rows"]:
            job = (row["solution"], row["workload"])
            if row["ours"] != "-" or job not in latest:  # a run stopped early decides nothing
                latest[job] = row
    return {job for job, row in latest.items() if row["ours"] == "-" or _near_miss(row)}


# "matched 99.9918% of elements": at least this share within tolerance is a near miss.
NEAR_MISS = 99.0


def _near_miss(row: dict[str, Any]) -> bool:
    if row["ours"] != "INCORRECT_NUMERICAL":
        return False
    found = re.search(r"matched ([0-9.]+)% of elements", str(row.get("ours_detail", {})))
    return found is not None and float(found.group(1)) >= NEAR_MISS
