"""Summarize ``nvidia-smi dmon -s pucm -o T`` output: each GPU's mean SM clock, memory clock and
power over the seconds it was busy, grouped by how many GPUs were busy at that second. Whether a
GPU runs slower while its neighbours work (a host's power or cooling limit) shows as a lower clock
in the rows of more busy GPUs.

    python scripts/dmon_summary.py dmon.txt [--busy 30]
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path


def samples(text: str) -> list[dict[str, str]]:
    """The rows of a dmon log as dicts by column name (the first header line names them)."""
    columns: list[str] = []
    rows = []
    for line in text.splitlines():
        if line.startswith("#"):
            if not columns:
                columns = line.lstrip("#").split()
            continue
        values = line.split()
        if columns and len(values) == len(columns):
            rows.append(dict(zip(columns, values, strict=True)))
    return rows


def number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:  # "-" where dmon has no reading
        return None


def summary(rows: list[dict[str, str]], busy: float) -> list[str]:
    by_time: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        by_time[row.get("Time", "")].append(row)
    grouped: dict[tuple[int, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for rows_now in by_time.values():
        working = [r for r in rows_now if (number(r.get("sm")) or 0.0) >= busy]
        for row in working:
            entry = grouped[(len(working), row["gpu"])]
            for name in ("pclk", "mclk", "pwr", "sm"):
                value = number(row.get(name))
                if value is not None:
                    entry[name].append(value)
    lines = ["busy GPUs  gpu  seconds  SM MHz  mem MHz  power W  SM util %"]
    for (count, gpu), entry in sorted(grouped.items()):
        means = {
            name: f"{statistics.mean(entry[name]):.0f}" if entry.get(name) else "-"
            for name in ("pclk", "mclk", "pwr", "sm")
        }
        seconds = len(entry.get("sm") or [])
        lines.append(
            f"{count:>9}  {gpu:>3}  {seconds:>7}  {means['pclk']:>6}  {means['mclk']:>7}  "
            f"{means['pwr']:>7}  {means['sm']:>9}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument(
        "--busy", type=float, default=30.0, help="SM utilization that counts as busy"
    )
    args = parser.parse_args()
    print("\n".join(summary(samples(args.log.read_text()), args.busy)))


if __name__ == "__main__":
    main()
