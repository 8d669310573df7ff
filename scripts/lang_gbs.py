"""GB/s of every passed trace of some definitions, solutions side by side (issue 42's comparison).

Usage: python3 scripts/lang_gbs.py DATASET_FOLDER DEFINITION [DEFINITION ...]
Reads the traces a `kernelarena run` appended to the dataset folder and prints, per definition and
performance workload, each solution's median latency and bytes_moved / latency, the best first,
with each solution's share of the best.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from kernelarena.data import Status, TraceSet
from kernelarena.library import load_library


def main(folder: str, names: list[str]) -> None:
    library = load_library()
    traces = TraceSet.load(Path(folder))
    for name in names:
        definition = library.definitions[name]
        rows: dict[str, dict[str, float]] = defaultdict(dict)
        labels: dict[str, str] = {}
        for trace in traces.traces.get(name, []):
            evaluation = trace.evaluation
            if evaluation is None or evaluation.status is not Status.PASSED:
                continue
            if "performance" not in (trace.workload.tags or []) or evaluation.performance is None:
                continue
            latency = evaluation.performance.latency_ms
            axes = definition.resolve_axes(trace.workload.axes)
            moved = definition.cost("bytes_moved", axes)
            if not latency or moved is None or trace.solution is None:
                continue
            uuid = trace.workload.uuid
            labels[uuid] = " ".join(f"{k}={v}" for k, v in trace.workload.axes.items())
            rows[uuid][trace.solution] = moved / (latency * 1e-3) / 1e9
        print(f"{name} ({evaluation_hardware(traces, name)})")
        for uuid, by_solution in rows.items():
            best = max(by_solution.values())
            print(f"  {labels[uuid]}")
            for solution, gbs in sorted(by_solution.items(), key=lambda item: -item[1]):
                print(f"    {solution:48s} {gbs:8.1f} GB/s  {100 * gbs / best:5.1f}% of best")


def evaluation_hardware(traces: TraceSet, name: str) -> str:
    found = {t.evaluation.environment.hardware for t in traces.traces.get(name, []) if t.evaluation}
    return ", ".join(sorted(found)) or "no traces"


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
