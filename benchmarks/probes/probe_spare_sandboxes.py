"""How many spare sandboxes a GPU's judge should keep ready: bench_scaling's jobs run over one and
several GPUs with each spare count in turn, in one sitting, alternating the order from one repeat
to the next. Each run reports its wall time and its waits for new sandboxes (the first jobs' apart:
those wait for the start-up forks, which no spare count changes).

    python3 -m benchmarks.probes.probe_spare_sandboxes --devices cuda:0,cuda:1,cuda:2,cuda:3 \
        --counts 1,4 --spares 1,2 --repeats 3 [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_scaling import DEFINITIONS, SOLUTIONS, run_once

from kernelarena.evaluate.executors.devices import resolve_devices
from kernelarena.evaluate.executors.jobs import Timeouts
from kernelarena.evaluate.executors.runner import plan
from kernelarena.evaluate.options import Options
from kernelarena.evaluate.sandbox.sandboxes import SPARES_ENV
from kernelarena.library import load_library


def summary(run: dict[str, Any]) -> dict[str, Any]:
    waits = run["sandbox_waits"]
    first = [w for w in waits if w["nth"] == 1]
    return {
        "run_s": round(run["run_s"], 2),
        "startup_s": round(run["startup_s"], 2),
        "waits": len(waits),
        "wait_s": round(sum(w["total_ms"] for w in waits) / 1e3, 2),
        "first_jobs_wait_s": round(sum(w["total_ms"] for w in first) / 1e3, 2),
        "jobs_per_device": run["jobs_per_device"],
        "not_passed": sorted(run["failures"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="cuda:0,cuda:1,cuda:2,cuda:3")
    parser.add_argument("--counts", default="1,4", help="device counts, as 1,4")
    parser.add_argument("--spares", default="1,2", help="spare counts to alternate, as 1,2")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-jobs", type=int, help="only the first N jobs (dry runs)")
    parser.add_argument("--no-warmup", action="store_true", help="skip the pass over every job")
    parser.add_argument("--json", type=Path, help="write every run's summary here")
    args = parser.parse_args()

    widest = resolve_devices(args.devices)
    counts = [int(c) for c in args.counts.split(",")]
    spares = args.spares.split(",")
    jobs = plan(
        load_library(), DEFINITIONS.split(","), SOLUTIONS.split(","), "all",
        widest[0].startswith("cuda"), Options(),
    )[: args.max_jobs]  # fmt: skip
    timeouts = Timeouts()
    print(f"{len(jobs)} jobs; device counts {counts}; spare counts {spares}", flush=True)
    if not args.no_warmup:
        began = time.perf_counter()
        run_once(jobs, widest, timeouts)
        print(f"warm-up over every job: {time.perf_counter() - began:.1f} s", flush=True)

    rows: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        for n in counts:
            for spare in spares if repeat % 2 == 0 else spares[::-1]:
                os.environ[SPARES_ENV] = spare  # the workers inherit it as they start
                row = {"devices": n, "spares": spare, "repeat": repeat}
                row |= summary(run_once(jobs, widest[:n], timeouts))
                rows.append(row)
                print(
                    f"{n} GPU(s), {spare} spare(s): run {row['run_s']:.1f} s, start-up "
                    f"{row['startup_s']:.1f} s, {row['waits']} waits {row['wait_s']:.2f} s (first "
                    f"jobs {row['first_jobs_wait_s']:.2f} s), {row['jobs_per_device']}"
                    + (f", not passed: {row['not_passed']}" if row["not_passed"] else ""),
                    flush=True,
                )
    os.environ.pop(SPARES_ENV, None)
    for n in counts:
        for spare in spares:
            mine = [r for r in rows if r["devices"] == n and r["spares"] == spare]
            print(
                f"median {n} GPU(s), {spare} spare(s): run "
                f"{statistics.median(r['run_s'] for r in mine):.2f} s, waits "
                f"{statistics.median(r['wait_s'] for r in mine):.2f} s over {len(mine)} runs"
            )
    if args.json:
        args.json.write_text(json.dumps({"jobs": len(jobs), "runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
