"""Where two runs of the same jobs spent their wall time: the traces of two kernelarena runs (their
dataset folders), each job's time taken as the gap between its trace and the trace before it
(jobs run one at a time on one device), paired by (solution, workload) over the jobs both runs
finished, by the solution's kind and split into each solution's first job (its build, sandbox and
first-call compilation: Triton's JIT, torch.compile) and the rest.

    python benchmarks/compare_run_walls.py --before DS_OLD --after DS_NEW --label library_run

Made for runs cut short by a time limit: only the jobs both runs reached are compared. Prints a
table and writes benchmarks/results/<label>_<device>_<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.compare_runs import hardware
from benchmarks.harness import write_report

JobKey = tuple[str, str]  # solution, workload uuid


def job_walls(folder: Path) -> tuple[dict[JobKey, float], set[JobKey], int]:
    """Each job's seconds since the trace before it (the first trace has none), the jobs that
    were their solution's first in the run, and the number of traces."""
    stamped = []
    for path in sorted(folder.glob("traces/**/*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                trace = json.loads(line)
                when = _dt.datetime.fromisoformat(trace["evaluation"]["timestamp"])
                stamped.append((when, trace["solution"], trace["workload"]["uuid"]))
    stamped.sort()
    walls, first, seen = {}, set(), set()
    for (earlier, *_), (when, solution, workload) in itertools.pairwise(stamped):
        walls[(solution, workload)] = (when - earlier).total_seconds()
    for _, solution, workload in stamped:
        if solution not in seen:
            seen.add(solution)
            first.add((solution, workload))
    return walls, first, len(stamped)


def kind(solution: str) -> str:
    """The library's naming: a solution's last word says its language or peer."""
    for marker in ("torch_compile", "torch_eager", "sdpa"):
        if marker in solution:
            return marker
    return solution.rsplit("_", 1)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--label", default="run_walls")
    arguments = parser.parse_args()
    before, first_before, traces_before = job_walls(arguments.before)
    after, first_after, traces_after = job_walls(arguments.after)
    common = sorted(set(before) & set(after))
    rows: dict[str, dict[str, Any]] = defaultdict(
        lambda: {
            "jobs": 0,
            "before_s": 0.0,
            "after_s": 0.0,
            "first_before_s": 0.0,
            "first_after_s": 0.0,
        }
    )
    for key in common:
        for group in (kind(key[0]), "all"):
            row = rows[group]
            row["jobs"] += 1
            row["before_s"] += before[key]
            row["after_s"] += after[key]
            row["first_before_s"] += before[key] if key in first_before else 0.0
            row["first_after_s"] += after[key] if key in first_after else 0.0
    print(f"{len(common)} jobs in both runs (traces: before {traces_before}, after {traces_after})")
    print(
        f"{'kind':14} {'jobs':>5} {'before s':>9} {'after s':>9} {'ratio':>6} {'first jobs s':>16}"
    )
    for group, row in sorted(rows.items(), key=lambda item: -item[1]["before_s"]):
        ratio = row["after_s"] / row["before_s"] if row["before_s"] else float("nan")
        firsts = f"{row['first_before_s']:.1f} -> {row['first_after_s']:.1f}"
        print(
            f"{group:14} {row['jobs']:5d} {row['before_s']:9.1f} {row['after_s']:9.1f} "
            f"{ratio:6.2f} {firsts:>16}"
        )
    report = {
        "environment": {
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "device": hardware(arguments.after),
        },
        "before": {"folder": str(arguments.before), "traces": traces_before},
        "after": {"folder": str(arguments.after), "traces": traces_after},
        "common_jobs": len(common),
        "by_kind": {group: {k: round(v, 3) for k, v in row.items()} for group, row in rows.items()},
    }
    print(write_report(arguments.label, report))


if __name__ == "__main__":
    main()
