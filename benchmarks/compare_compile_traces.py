"""Are the torch.compile peers' traces what ``bench_norms.py`` measures for the same compiled code?

The engine times a peer inside its sandbox; ``bench_norms.py`` times the same compiled function
directly, warmed per shape. Per norm definition and performance shape: the trace's latency of the
``*_torch_compile`` solution on this GPU against the benchmark's ``compile`` median, and their
ratio. Bar (issue 18): within 10%. Traces from a dataset folder (``--dataset``, e.g. the one a
library run wrote) or, by default, the shipped ones.

    python benchmarks/compare_compile_traces.py benchmarks/results/norms_<gpu>_<date>.json
    python benchmarks/compare_compile_traces.py RESULTS.json --dataset /tmp/ka-dataset
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernelarena.library import SHIPPED_TRACES

BAR = 0.10
DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}


def bench_figures(results: dict[str, Any]) -> dict[tuple[str, int, int], float]:
    """(definition, rows, hidden) -> the benchmark's compile median in ms."""
    found = {}
    for row in results["rows"]:
        if row["provider"] != "compile" or row["status"] != "ok":
            continue
        params = row["params"]
        definition = f"{params['op']}_{DTYPES[params['dtype']]}"
        found[(definition, params["rows"], params["hidden"])] = row["median_ms"]
    return found


def trace_figures(root: Path, hardware: str) -> dict[tuple[str, int, int], dict[str, Any]]:
    """(definition, rows, hidden) -> the newest passed trace of its torch.compile peer here.
    Read as plain JSON from every ``*.jsonl`` under ``root`` (a dataset or the shipped folder)."""
    found: dict[tuple[str, int, int], dict[str, Any]] = {}
    for path in sorted(root.rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            trace = json.loads(line) if line.strip() else {}
            evaluation = trace.get("evaluation") or {}
            performance = evaluation.get("performance") or {}
            name = str(trace.get("definition"))
            if (
                trace.get("solution") != f"{name}_torch_compile"
                or not name.endswith(tuple(DTYPES.values()))
                or evaluation.get("status") != "PASSED"
                or (evaluation.get("environment") or {}).get("hardware") != hardware
                or performance.get("latency_ms") is None
            ):
                continue
            axes = trace["workload"]["axes"]
            key = (name, axes.get("rows"), axes.get("hidden"))
            if key in found and found[key]["timestamp"] >= evaluation["timestamp"]:
                continue
            found[key] = {
                "latency_ms": performance["latency_ms"],
                "timing_mode": performance.get("timing_mode"),
                "compiles_while_timed": performance.get("compiles_while_timed"),
                "timestamp": evaluation["timestamp"],
            }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a bench_norms.py results JSON")
    parser.add_argument("--dataset", type=Path, help="traces from here (default: shipped)")
    arguments = parser.parse_args()
    results = json.loads(arguments.results.read_text())
    hardware = results["environment"]["device"]
    root = arguments.dataset or SHIPPED_TRACES
    traces = trace_figures(root, hardware)
    rows = []
    for key, bench_ms in sorted(bench_figures(results).items()):
        trace = traces.get(key)
        ratio = trace["latency_ms"] / bench_ms if trace else None
        rows.append({"case": list(key), "bench_ms": bench_ms, "trace": trace, "ratio": ratio})
        shown = f"{ratio:.3f}" if ratio else "no trace"
        verdict = "" if ratio is None else ("ok" if abs(ratio - 1) <= BAR else "OUT")
        print(
            f"{key[0]:<24} {key[1]:>6}x{key[2]:<6} bench {bench_ms * 1e3:9.1f} us  "
            f"trace {trace['latency_ms'] * 1e3 if trace else float('nan'):9.1f} us  "
            f"ratio {shown}  {verdict}"
        )
    compared = [r for r in rows if r["ratio"] is not None]
    within = sum(abs(r["ratio"] - 1) <= BAR for r in compared)
    print(
        f"{hardware}: {within} of {len(compared)} compared shapes within {BAR:.0%} "
        f"({len(rows) - len(compared)} without a trace)"
    )
    out = arguments.results.with_name(arguments.results.stem + "_compile_traces.json")
    out.write_text(json.dumps({"hardware": hardware, "bar": BAR, "rows": rows}, indent=1) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
