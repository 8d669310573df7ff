"""Scaling of the local executor: one job-heavy run over one device, then over two (or more).

    python -m benchmarks.bench_scaling                         # cuda:0 vs cuda:0,cuda:1
    python -m benchmarks.bench_scaling --devices cpu,cpu --solutions torch_eager --max-jobs 40
    python -m benchmarks.bench_scaling --devices cuda --profile /tmp/scaling-profiles
    python -m benchmarks.bench_scaling --devices cuda --executor ray   # a Ray actor per GPU

The workload is ``kernelarena run rmsnorm scale --suite all -s triton,cuda,torch_eager``: 261 jobs
on a GPU, each checked and timed, each trace appended (and fsynced) to a scratch dataset as in a real
run. torch.compile solutions are left out by default: Inductor compiling every shape would make the
run measure the compiler (``--solutions all`` puts them back).

The same jobs run over the first device alone and over the first 2, 4, ... of ``--devices``, in the
same process, each with its own executor. Worker start-up (importing torch, creating the CUDA
context) is timed apart from the run: it happens once per worker, in parallel, and is not what
scaling is about. Builds and compiler caches (kernelarena's build cache, Triton's) live on disk and
would make whichever configuration runs second look faster, so a warm-up pass runs every job once
first; configurations then alternate in order from one repeat to the next. The results, with the
jobs each device took (jobs go to whichever worker is free), land in
``benchmarks/results/scaling_<device>_<date>.json``.

Each run also prints where its devices' time went, as the engine records it (``evaluate/
stage_clock.py``): per device, the sandboxes its judge started and the mean milliseconds per job
in each phase of the judge (decode, sandbox_start, build, checks, timing, finish, reply),
its idle wait between jobs and the parent's share, then the larger nested stages
(``timing/judge_clocks/sandbox:eager``: the judge's clocks waiting on the sandbox). The JSON keeps
every stage of every run (``stages``) and, per device count, the phases of the median run
(``ms_per_job_by_phase``), and ``growth``: each job's judge time on one device against the same
job's with the most devices, by band of job length and by definition, and the stages that grew
(``scaling_growth``). ``--profile DIR`` also writes cProfile files of each measured run's
parent and judges (``DIR/<n>dev-r<repeat>/``, with a text summary beside each; with ``--executor
ray``, the judges of every run in ``DIR/ray-judges/``); cProfile slows the judges' Python, so take
speedups and stage times from a run without it. ``--executor ray`` runs the same over a Ray
started in this process, one actor per device (Ray picks the GPUs); its results land in
``scaling_ray_<device>_<date>.json``.

On a CPU, ``--devices cpu,cpu`` starts two workers on the CPU: a dry run of the mechanics. Both
share the same cores (and torch's intra-op threads), so expect little speedup there.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.harness import kernelarena_git_rev, result_path, sandbox_walls
from benchmarks.host_cpu import HostCpu
from benchmarks.host_cpu import describe as describe_host_cpu
from benchmarks.profiles import parent_profiled, summarize, workers_profiled
from benchmarks.scaling_growth import growth, growth_lines
from kernelarena.data import TraceSet
from kernelarena.evaluate.executors.devices import resolve_devices, visible_gpu_count
from kernelarena.evaluate.executors.job_stages import (
    NEW_SANDBOX,
    job_record,
    phase_means,
    stage_table,
)
from kernelarena.evaluate.executors.jobs import Job, JobResult, Timeouts
from kernelarena.evaluate.executors.local import LocalExecutor
from kernelarena.evaluate.executors.runner import Executor, plan, run_jobs
from kernelarena.evaluate.options import Options
from kernelarena.evaluate.sandbox.sandboxes import SPARES_ENV
from kernelarena.library import load_library

TARGET_SPEEDUP_TWO_DEVICES = 1.8
# The run measured: rmsnorm and scale, each in three languages (``--definitions``, ``--solutions``).
DEFINITIONS = "rmsnorm,scale"
SOLUTIONS = "triton,cuda,torch_eager"


def device_counts(total: int) -> list[int]:
    """1, 2, 4, ... up to ``total``, and ``total`` itself."""
    counts = [1]
    while counts[-1] * 2 < total:
        counts.append(counts[-1] * 2)
    if total > 1:
        counts.append(total)
    return counts


def chosen_counts(asked: str | None, total: int) -> list[int]:
    """``--counts`` as a list (each between 1 and ``total``), else ``device_counts(total)``."""
    if not asked:
        return device_counts(total)
    counts = sorted({int(c) for c in asked.split(",") if c.strip()})
    if not counts or counts[0] < 1 or counts[-1] > total:
        raise SystemExit(f"--counts {asked}: each count must be between 1 and {total} devices")
    return counts


def make_executor(kind: str, devices: list[str], timeouts: Timeouts) -> Executor:
    """A local executor on ``devices``, or Ray actors, one per device (Ray picks the GPUs; the
    list counts them), started in the Ray of this process (``main``)."""
    if kind == "local":
        return LocalExecutor(devices, timeouts, measure_ceilings=False)
    from kernelarena.evaluate.executors.ray_executor import RayExecutor

    return RayExecutor(
        timeouts=timeouts,
        device="cuda" if devices[0].startswith("cuda") else "cpu",
        workers=len(devices),
        measure_ceilings=False,
        join_grace_s=timeouts.startup_s,  # every actor ready before the clock starts
    )


def run_once(
    jobs: list[Job],
    devices: list[str],
    timeouts: Timeouts,
    profile: Path | None = None,
    executor_kind: str = "local",
) -> dict[str, Any]:
    """Start workers on ``devices``, run ``jobs`` into a scratch dataset; time both apart. With
    ``profile``, the run's parent and judges are profiled into that folder (``profiles``)."""
    taken: Counter[str] = Counter()
    statuses: dict[tuple[str, str, str], str] = {}
    failures: dict[str, str] = {}  # job -> the end of its trace's log, for what did not pass
    per_job: dict[str, Any] = {}  # job -> its device, axes and stages (``scaling_growth``)
    waits: list[dict[str, Any]] = []  # the jobs that waited for a sandbox to be ready

    def record(job: Job, result: JobResult | None) -> None:
        if result is None:
            return
        taken[result.device] += 1
        if result.stages:
            per_job["/".join(job.key)] = job_record(job, result)
            wait = sandbox_wait(job, result, taken[result.device], time.perf_counter())
            if wait is not None:
                waits.append(wait)
        if result.trace is not None and result.trace.evaluation is not None:
            evaluation = result.trace.evaluation
            statuses[job.key] = evaluation.status.value
            if evaluation.status.value != "PASSED":
                failures["/".join(job.key)] = evaluation.log.strip()[-400:]
        else:
            statuses[job.key] = f"skipped: {result.skipped}"

    executor = make_executor(executor_kind, devices, timeouts)
    with (
        tempfile.TemporaryDirectory(prefix="kernelarena-scaling-") as scratch,
        workers_profiled(profile),
    ):
        try:
            began = time.perf_counter()
            environments = executor.start()
            started = time.perf_counter()
            host_before = HostCpu.read()
            with parent_profiled(profile):
                output = TraceSet(root=Path(scratch))
                summary = run_jobs(jobs, executor, output, on_progress=record)
            finished = time.perf_counter()
            host_after = HostCpu.read()
        finally:
            executor.close()  # the judges write their profiles as they stop
    if profile is not None:
        summarize(profile)
    for wait in waits:
        wait["done_at_s"] = round(wait["done_at_s"] - started, 2)
    return {
        "devices": devices,
        "startup_s": started - began,
        "run_s": finished - started,
        "jobs_per_device": dict(sorted(taken.items())),
        "host_cpu": host_after.since(host_before) if host_after and host_before else {},
        "stages": summary.stages,
        "statuses": statuses,
        "failures": failures,
        "per_job": per_job,
        "sandbox_waits": waits,
        "environments": environments,
    }


def sandbox_wait(job: Job, result: JobResult, nth: int, now: float) -> dict[str, Any] | None:
    """``job``'s waits for new sandboxes (its own, ``sandbox_start/new_sandbox`` and what it
    holds, and its reference's, ``checks/sandbox_ready``), where together 50 ms or more: its
    device, its place among the device's jobs and when it was done, so that a run's first jobs
    show apart from the switches between solutions."""
    ms = {
        stage: round(1e3 * seconds, 1)
        for stage, seconds in result.stages.items()
        if stage.startswith(NEW_SANDBOX) or stage.endswith("sandbox_ready")
    }
    total_ms = round(sum(ms.values()), 1)
    if total_ms < 50:
        return None
    return {
        "job": "/".join(job.key),
        "device": result.device,
        "nth": nth,
        "done_at_s": now,
        "total_ms": total_ms,
        "ms": ms,
    }


def start_ray(profile: Path | None) -> None:
    """A Ray of this process's own for the Ray executor's runs. Ray's workers keep the
    environment they start with, so with ``profile`` the judges inside its actors profile
    themselves into ``profile/ray-judges`` (every run's together)."""
    import ray

    if profile is not None:
        (profile / "ray-judges").mkdir(parents=True, exist_ok=True)
        os.environ["KERNELARENA_WORKER_PROFILE"] = str(profile / "ray-judges")
    ray.init(address="local", include_dashboard=False, log_to_driver=False)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--devices", help="the widest device list (default: cuda:0,cuda:1 or cpu,cpu)"
    )
    parser.add_argument("--definitions", default=DEFINITIONS, help="definitions or families")
    parser.add_argument(
        "--solutions",
        default=SOLUTIONS,
        help=f"solution names, suffixes or languages, or 'all' (default: {SOLUTIONS})",
    )
    parser.add_argument("--suite", default="all", help="workload tag, or all")
    parser.add_argument("--trials", type=int, default=3, help="checks with fresh inputs per job")
    parser.add_argument("--no-timing", action="store_true", help="check correctness only")
    parser.add_argument("--max-jobs", type=int, help="only the first N jobs (dry runs)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per device count")
    parser.add_argument(
        "--counts",
        help="device counts to run, as 1,4 (default: 1, 2, 4, ... and every device); without 1, "
        "no speed-up is computed (a variant's widest run, set beside another run's)",
    )
    parser.add_argument(
        "--warmup",
        choices=("all", "builds", "none"),
        default="all",
        help="before measuring, run every job once (all), one job per solution (builds), or none",
    )
    parser.add_argument("--no-write", action="store_true", help="print, do not save the JSON")
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="a worker per device, or a Ray actor per device in a Ray started here",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="cProfile each measured run's parent and judges into a folder of this one "
        "(<devices>dev-r<repeat>/: parent.prof, worker-<pid>.prof, and a .txt summary of each); "
        "the profiled runs are slower than plain ones",
    )
    args = parser.parse_args(argv)

    default = "cuda:0,cuda:1" if visible_gpu_count() >= 2 else "cpu,cpu"
    widest = resolve_devices(args.devices or default)
    on_gpu = any(d.startswith("cuda") for d in widest)
    options = Options(trials=args.trials, timing=not args.no_timing)
    timeouts = Timeouts()
    library = load_library()
    solutions = None if args.solutions == "all" else args.solutions.split(",")
    jobs = plan(library, args.definitions.split(","), solutions, args.suite, on_gpu, options)
    jobs = jobs[: args.max_jobs] if args.max_jobs else jobs
    counts = chosen_counts(args.counts, len(widest))
    print(f"{len(jobs)} jobs; device counts {counts} of {','.join(widest)}")
    if args.executor == "ray":
        start_ray(args.profile)

    warmup_s = 0.0
    if args.warmup != "none":
        warm = jobs if args.warmup == "all" else list({j.solution.name: j for j in jobs}.values())
        began = time.perf_counter()
        run_once(warm, widest, timeouts, executor_kind=args.executor)
        warmup_s = time.perf_counter() - began
        print(f"warm-up: {len(warm)} jobs in {warmup_s:.1f} s")

    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    for repeat in range(args.repeats):
        order = counts if repeat % 2 == 0 else counts[::-1]
        for n in order:
            profile = args.profile / f"{n}dev-r{repeat}" if args.profile else None
            run = run_once(jobs, widest[:n], timeouts, profile, args.executor)
            runs[n].append(run)
            print(
                f"{n} device(s): run {run['run_s']:.1f} s, start-up {run['startup_s']:.1f} s, "
                f"jobs per device {run['jobs_per_device']}"
                + (f"; {describe_host_cpu(run['host_cpu'])}" if run["host_cpu"] else "")
            )
            print("\n".join(stage_table(run["stages"], f"{n} device(s)")))
            for wait in sorted(run["sandbox_waits"], key=lambda w: -w["total_ms"])[:12]:
                print(
                    f"  sandbox wait {wait['total_ms']:6.0f} ms: {wait['device']} job "
                    f"{wait['nth']}, done at {wait['done_at_s']:.1f} s, {wait['job']}"
                )
            for key, log in run["failures"].items():
                print(f"  not passed: {key}: {log.splitlines()[-1] if log else ''}")
            for key, status in run["statuses"].items():
                if status.startswith("skipped"):
                    print(f"  {'/'.join(key)}: {status[:300]}")

    if args.profile is not None and args.executor == "ray":
        summarize(args.profile / "ray-judges")  # written as the actors stopped
    report = build_report(args, jobs, widest, runs, warmup_s)
    for n, row in report["results"].items():
        speedup = "" if row["speedup"] is None else f", speedup {row['speedup']:.2f}x"
        print(
            f"{n} device(s): median run {row['median_run_s']:.1f} s{speedup}, "
            f"{row['device_s_per_job']:.3f} s of a device per job"
            + (f"; {describe_host_cpu(row['host_cpu'])}" if row["host_cpu"] else "")
        )
    if report.get("growth"):
        print("\n".join(growth_lines(report["growth"], f"{max(runs)} devices")))
    if report["disagreements"]:
        print(f"{len(report['disagreements'])} jobs changed status between runs (see the JSON)")
    if not args.no_write:
        name = "scaling" if args.executor == "local" else f"scaling_{args.executor}"
        path = result_path(name, report["environment"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {path}")
    return report


def build_report(
    args: argparse.Namespace,
    jobs: list[Job],
    widest: list[str],
    runs: dict[int, list[dict[str, Any]]],
    warmup_s: float,
) -> dict[str, Any]:
    one = runs.get(1)
    single = statistics.median(r["run_s"] for r in one) if one else None
    single_total = statistics.median(r["run_s"] + r["startup_s"] for r in one) if one else None
    results: dict[str, Any] = {}
    for n, measured in runs.items():
        median_run = statistics.median(r["run_s"] for r in measured)
        median_total = statistics.median(r["run_s"] + r["startup_s"] for r in measured)
        middle = min(measured, key=lambda r: abs(r["run_s"] - median_run))
        results[str(n)] = {
            "devices": widest[:n],
            "median_run_s": median_run,
            "speedup": single / median_run if single else None,
            "speedup_with_startup": single_total / median_total if single_total else None,
            # Each device's wall time per job, and where it went (the run nearest the median).
            "device_s_per_job": n * median_run / max(len(jobs), 1),
            "host_cpu": middle.get("host_cpu", {}),
            "ms_per_job_by_phase": {
                device: {k: round(1e3 * v, 2) for k, v in phase_means(entry).items()}
                for device, entry in middle["stages"].items()
            },
            "runs": [
                {k: v for k, v in r.items() if k not in ("statuses", "environments", "per_job")}
                for r in measured
            ],
        }
    # A parallel run must not change any result: every job's status, run by run.
    reference = runs[min(runs)][0]["statuses"]
    disagreements = sorted(
        {
            "/".join(key)
            for measured in runs.values()
            for run in measured
            for key, status in run["statuses"].items()
            if reference.get(key) != status
        }
    )
    environments = runs[max(runs)][0]["environments"]
    hardware = sorted({e["hardware"] for e in environments})
    two = results.get("2")
    return {
        "benchmark": "scaling",
        "environment": {
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "device": " + ".join(hardware),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "workers": environments,
            "sandbox_walls": sandbox_walls(),
            "kernelarena_git_rev": kernelarena_git_rev(),
        },
        "workload": {
            "definitions": args.definitions,
            "solutions": args.solutions,
            "suite": args.suite,
            "trials": args.trials,
            "timing": not args.no_timing,
            "jobs": len(jobs),
            "jobs_by_solution": dict(Counter(j.solution.name for j in jobs)),
            "warmup": args.warmup,
            "executor": args.executor,
            "warmup_s": warmup_s,
            "repeats": args.repeats,
            "spare_sandboxes": os.environ.get(SPARES_ENV, "default"),
        },
        "results": results,
        "target_speedup_two_devices": TARGET_SPEEDUP_TWO_DEVICES,
        "meets_target": None
        if two is None or two["speedup"] is None
        else two["speedup"] >= TARGET_SPEEDUP_TWO_DEVICES,
        "disagreements": disagreements,
        "statuses": dict(Counter(reference.values())),
        # Each job's judge time on one device and with the most (median runs): where it grew.
        "growth": _growth_of_medians(runs),
    }


def _growth_of_medians(runs: dict[int, list[dict[str, Any]]]) -> dict[str, Any] | None:
    widest = max(runs)
    if widest == 1 or 1 not in runs:
        return None
    middle = {
        n: min(
            measured,
            key=lambda r: abs(r["run_s"] - statistics.median(m["run_s"] for m in measured)),
        )
        for n, measured in runs.items()
    }
    return growth(middle[1]["per_job"], middle[widest]["per_job"])


if __name__ == "__main__":
    main()
