"""Latency of the same solutions in two engines, or two runs: the traces of kernelarena runs on one
machine, read from their dataset folders, paired by (solution, workload), as the ratio of the
second group's median latency to the first's, beside each group's own run-to-run spread.

    python benchmarks/compare_runs.py --before DS_OLD_1 DS_OLD_2 --after DS_NEW_1 DS_NEW_2 \
        --label verdict_parity

Prints a table per definition (median ratio, spread) and writes
benchmarks/results/<label>_<device>_<date>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import environment, write_report


def latencies(folder: Path) -> dict[tuple[str, str, str], dict[str, float]]:
    """(definition, solution, workload) -> {"gpu": latency_ms, "eager": eager_call_ms} of PASSED
    traces (the last one where a pair has several)."""
    found: dict[tuple[str, str, str], dict[str, float]] = {}
    for path in sorted(folder.glob("traces/**/*.jsonl")):
        for line in path.read_text().splitlines():
            trace = json.loads(line)
            evaluation = trace.get("evaluation") or {}
            performance = evaluation.get("performance") or {}
            if evaluation.get("status") != "PASSED" or not performance.get("latency_ms"):
                continue
            key = (trace["definition"], trace["solution"], trace["workload"]["uuid"])
            found[key] = {
                "gpu": performance["latency_ms"],
                "eager": performance.get("eager_call_ms") or float("nan"),
            }
    return found


def hardware(folder: Path) -> str:
    """The hardware the first trace in ``folder`` names."""
    for path in sorted(folder.glob("traces/**/*.jsonl")):
        for line in path.read_text().splitlines():
            named = (json.loads(line).get("evaluation") or {}).get("environment", {})
            if named.get("hardware"):
                return str(named["hardware"])
    return "unknown"


def spread(runs: list[dict[tuple[str, str, str], dict[str, float]]], key: Any, what: str) -> float:
    """max/min - 1 of one pair's figure across the runs of a group (0 with one run)."""
    values = [run[key][what] for run in runs if key in run]
    return max(values) / min(values) - 1 if len(values) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, nargs="+", required=True)
    parser.add_argument("--after", type=Path, nargs="+", required=True)
    parser.add_argument("--label", default="run_comparison")
    arguments = parser.parse_args()
    before = [latencies(folder) for folder in arguments.before]
    after = [latencies(folder) for folder in arguments.after]
    keys = sorted(set.intersection(*(set(run) for run in before + after)))
    rows = []
    for key in keys:
        row: dict[str, Any] = {"definition": key[0], "solution": key[1], "workload": key[2]}
        for what in ("gpu", "eager"):
            old = statistics.median(run[key][what] for run in before)
            new = statistics.median(run[key][what] for run in after)
            row[f"{what}_ratio"] = new / old
            row[f"{what}_spread_before"] = spread(before, key, what)
            row[f"{what}_spread_after"] = spread(after, key, what)
        rows.append(row)
    print(f"{'definition':28} {'pairs':>5} {'gpu new/old':>12} {'spread':>8} {'eager new/old':>14}")
    for definition in sorted({r["definition"] for r in rows}):
        mine = [r for r in rows if r["definition"] == definition]
        gpu = statistics.median(r["gpu_ratio"] for r in mine)
        noise = statistics.median(max(r["gpu_spread_before"], r["gpu_spread_after"]) for r in mine)
        eager = statistics.median(r["eager_ratio"] for r in mine)
        print(f"{definition:28} {len(mine):5d} {gpu:12.3f} {noise:8.3f} {eager:14.3f}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # The machine the traces were measured on, which need not be this one.
    measured = dict(environment(device), device=hardware(arguments.after[0]))
    report = {
        "environment": measured,
        "before": [str(p) for p in arguments.before],
        "after": [str(p) for p in arguments.after],
        "rows": rows,
    }
    print(write_report(arguments.label, report))


if __name__ == "__main__":
    main()
