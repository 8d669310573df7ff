"""Ship a GPU run's traces with the library: merge DATASET/traces into src/kernelarena/library/traces.

    # on the GPU machine: scripts/gpu_stage.sh library (or the same run by hand):
    kernelarena run --suite performance --device cuda:0 --allow-failures --trials 2
    # or only the stale jobs (solutions whose sources changed): scripts/gpu_stage.sh remeasure
    # here, with that dataset folder unpacked (the stage packs it as traces.tgz):
    python scripts/ship_traces.py /tmp/ka-dataset
    pytest tests/library/test_shipped_traces.py       # every shipped trace is current
    python scripts/ship_traces.py --drop-stale        # or drop what no GPU run re-measured

Only PASSED traces of performance workloads ship: dispatch admits nothing else. A shipped trace of
the same hardware, solution and workload as a new one is replaced, so re-measuring some solutions on
one GPU leaves the other solutions' and the other GPUs' traces as they were. Lines are copied as
written, not re-serialized.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

SHIPPED = Path(__file__).resolve().parent.parent / "src" / "kernelarena" / "library" / "traces"


def _slot(trace: dict[str, Any]) -> tuple[str, str, str]:
    return (
        trace["evaluation"]["environment"]["hardware"],
        trace.get("solution") or "",
        trace["workload"]["uuid"],
    )


def _ships(trace: dict[str, Any]) -> bool:
    evaluation = trace.get("evaluation") or {}
    tags = trace.get("workload", {}).get("tags") or []
    return evaluation.get("status") == "PASSED" and "performance" in tags


def merge(dataset: Path, shipped: Path = SHIPPED) -> dict[str, int]:
    """Merge every ``dataset/traces/<op_type>/<definition>.jsonl``; returns lines shipped per file."""
    counts: dict[str, int] = {}
    for source in sorted((dataset / "traces").rglob("*.jsonl")):
        new = [line for line in source.read_text().splitlines() if line.strip()]
        new = [line for line in new if _ships(json.loads(line))]
        latest = {_slot(json.loads(line)): line for line in new}  # a re-run's last line wins
        if not latest:
            continue
        target = shipped / source.relative_to(dataset / "traces")
        old = target.read_text().splitlines() if target.exists() else []
        kept = [line for line in old if line.strip() and _slot(json.loads(line)) not in latest]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(line + "\n" for line in [*kept, *latest.values()]))
        counts[str(target.relative_to(shipped))] = len(latest)
    return counts


def drop_stale(shipped: Path = SHIPPED) -> dict[str, int]:
    """Remove the shipped lines whose hashes are not today's definition, solution and workload
    (dispatch ignores them anyway); returns lines dropped per file."""
    from kernelarena.data import TraceHashes
    from kernelarena.library import load_library

    library = load_library()
    workloads = {w.uuid: w for listed in library.workloads.values() for w in listed}
    dropped: dict[str, int] = {}
    for target in sorted(shipped.rglob("*.jsonl")):
        kept, gone = [], 0
        for line in target.read_text().splitlines():
            if not line.strip():
                continue
            trace = json.loads(line)
            definition = library.definitions.get(trace.get("definition", ""))
            solution = library.solutions.get(trace.get("solution") or "")
            workload = workloads.get(trace["workload"]["uuid"])
            current = (
                definition is not None
                and solution is not None
                and workload is not None
                and trace.get("hashes")
                == TraceHashes.of(definition, solution, workload).model_dump()
            )
            if current:
                kept.append(line)
            else:
                gone += 1
        if gone:
            target.write_text("".join(line + "\n" for line in kept))
            dropped[str(target.relative_to(shipped))] = gone
    return dropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, nargs="?", help="the dataset folder a GPU run wrote")
    parser.add_argument("--shipped", type=Path, default=SHIPPED, help="library/traces folder")
    parser.add_argument("--drop-stale", action="store_true", help="drop lines of changed code")
    arguments = parser.parse_args()
    if arguments.dataset is not None:
        counts = merge(arguments.dataset, arguments.shipped)
        for name, count in counts.items():
            print(f"{name}: {count} traces shipped")
        print(f"{sum(counts.values())} traces in {len(counts)} files")
    if arguments.drop_stale:
        for name, count in drop_stale(arguments.shipped).items():
            print(f"{name}: {count} stale traces dropped")


if __name__ == "__main__":
    main()
