"""FlashInfer-Bench's published CUDA solutions through both tools, verdict by verdict.

The dataset is made by ``benchmarks/published/extract.py`` from flashinfer-bench's commit 4def975f:
its 47 distinct ``binding: torch`` solutions for rmsnorm_*, fused_add_rmsnorm_* and gemm_* (the
definitions whose workloads need no blob), with those definitions and workloads. Each tool gets a
copy of its own (so that neither reads the other's traces) and empty caches, and runs as a whole
command under a wall-clock limit:

    flashinfer-bench run --local COPY
    kernelarena run DEFINITIONS --dataset COPY --device cuda --suite all --allow-failures --json

(the definitions named in the order FlashInfer-Bench takes them, so that two runs stopped at their
limits got through the same definitions).
Modes: ``first4``, the first 4 workloads of each definition's file (issue 40: kernelarena end to
end, build cache empty, within 5 minutes; flashinfer-bench's time on the same set beside it);
``all``, every workload (issue 37: every job flashinfer-bench passes, kernelarena passes too, or
the mismatch reproduces outside it with ``benchmarks/published/reproduce.py``). A tool stopped at
its limit (FlashInfer-Bench has stalled with "Health check timeout") is recorded with what it
finished. Results: ``published_solutions_<device>_<date>_<mode>.json`` with the verdict of both
tools per (solution, workload), and a ``.md`` summary beside it that lists every job
flashinfer-bench passes and kernelarena does not. ``--dry-run`` (no GPU needed) loads the copies
with both tools, validates and plans them with kernelarena, and prints the commands.
``--peer-where-ours-fails`` runs flashinfer-bench only on what kernelarena did not pass: for issue
37 that is the whole question, and the peer's time goes where it answers something.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_vs_flashinfer_bench import (
    PEER_ENTRY,
    PRIME_PAGE_CACHE,
    gpu_holders,
    shown,
    versions,
    wait_for_gpu_processes,
)
from benchmarks.harness import environment, result_path
from benchmarks.published import verdicts
from benchmarks.published.copies import copy_dataset, failed_jobs, keep_only, unsettled_jobs

REPO = Path(__file__).resolve().parent.parent
MODES = {"first4": 4, "all": None}  # workloads taken from the top of each definition's file
MODE_DESCRIPTIONS = {"first4": "first 4 workloads of each definition", "all": "every workload"}
TOOLS = ("ours", "peer")
STOP_GRACE_S = 10.0
TEARDOWN_LIMIT_S = 20.0  # the next run waits at most this long for the GPU to be released


def command(tool: str, dataset: Path) -> list[str]:
    """kernelarena is given the definitions in the order FlashInfer-Bench takes them, so that two
    runs stopped at their limits have evaluated the same definitions as far as they got."""
    if tool == "peer":
        # Its defaults: 3 trials, 10 warm-up and 50 timed calls, atol = rtol = 1e-2, its
        # persistent worker per GPU, 300 s per solution evaluation.
        return [sys.executable, "-c", PEER_ENTRY, "run", "--local", str(dataset)]
    return [
        *(sys.executable, "-m", "kernelarena.cli", "run", *peer_order(dataset)),
        *("--dataset", str(dataset), "--device", "cuda", "--suite", "all"),
        *("--allow-failures", "--json"),
    ]


def peer_order(dataset: Path) -> list[str]:
    from flashinfer_bench.data import TraceSet

    return list(TraceSet.from_path(str(dataset)).definitions)


def tool_environment(tool: str, caches: Path, gpus: str) -> dict[str, str]:
    """Every cache either tool fills under ``caches``, new for each run: builds start empty."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpus, PYTHONUNBUFFERED="1")
    env["TORCH_EXTENSIONS_DIR"] = str(caches / "torch_extensions")
    env["TRITON_CACHE_DIR"] = str(caches / "triton")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(caches / "inductor")
    env["FIB_CACHE_PATH" if tool == "peer" else "KERNELARENA_CACHE"] = str(caches / tool)
    return env


def stop_tree(process: subprocess.Popen[str]) -> None:
    """SIGTERM to the tool and everything it started (workers, sandboxes, nvcc), then SIGKILL
    to what is left after a grace period: the next run needs the GPU and the cores free."""
    try:
        root = psutil.Process(process.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for member in tree:
        try:
            member.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(tree, timeout=STOP_GRACE_S)
    for member in alive:
        try:
            member.kill()
        except psutil.NoSuchProcess:
            continue


def run_tool(
    tool: str, dataset: Path, caches: Path, gpus: str, limit_s: float, logs: Path
) -> tuple[dict[str, Any], dict[tuple[str, str], dict[str, Any]]]:
    """One timed run of a whole command, and the verdicts it left; its output goes to files
    (the peer's log is long)."""
    argv = command(tool, dataset)
    log_path, out_path = logs / f"{tool}.log", logs / f"{tool}.stdout"
    started = time.perf_counter()
    with log_path.open("w") as log, out_path.open("w") as out:
        process = subprocess.Popen(
            argv, stdout=out, stderr=log, text=True, env=tool_environment(tool, caches, gpus)
        )
        try:
            returncode = process.wait(timeout=limit_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            stop_tree(process)
            returncode, timed_out = process.wait(), True
    wall_s = time.perf_counter() - started
    payload = ours_payload(out_path) if tool == "ours" else {}
    keep_traces(dataset, logs / f"{tool}-traces.tar.gz", out_path)
    log_text = log_path.read_text(errors="replace")
    if tool == "peer":
        found = verdicts.peer_verdicts(dataset, log_text)
    else:
        found = verdicts.traces_on_disk(dataset)
    record = {
        "tool": tool,
        "command": shown(argv),
        "limit_s": limit_s,
        "wall_s": wall_s,
        "timed_out": timed_out,
        "returncode": returncode,
        "jobs_with_verdict": len(found),
        "passed": sum(v["status"] == verdicts.PASSED for v in found.values()),
        "log_tail": log_text[-3000:],
    }
    if tool == "peer":
        record["stalls"] = verdicts.peer_stalls(log_text)
        record["verdicts_from_log_only"] = sum(v.get("from") == "log" for v in found.values())
    return record | payload, found


def keep_traces(dataset: Path, archive: Path, stdout: Path) -> None:
    """The traces as the tool wrote them (full logs: compiler errors included) and its stdout,
    in one file: few files come back from the GPU machine."""
    with tarfile.open(archive, "w:gz") as tar:
        if (dataset / "traces").is_dir():
            tar.add(dataset / "traces", arcname="traces")
        tar.add(stdout, arcname=stdout.name)
    stdout.unlink()


def ours_payload(stdout: Path) -> dict[str, Any]:
    """What ``--json`` printed at the end (nothing when stopped): skipped jobs, worker start-up,
    the build pool's times."""
    lines = stdout.read_text().strip().splitlines()
    if not lines:
        return {}
    try:
        payload = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {}
    return {
        "skipped": payload.get("skipped", []),
        "worker_startup": [e.get("startup") for e in payload.get("environments", [])],
        # The build pool: builds by status, its wall time and the builds' time in all.
        "builds": payload.get("builds", {}),
    }


def tool_limit(arguments: argparse.Namespace, tool: str) -> float:
    own = getattr(arguments, f"{tool}_limit_s")
    return float(own if own is not None else arguments.limit_s)


def run_mode(mode: str, arguments: argparse.Namespace, work: Path) -> dict[str, Any]:
    runs, found = [], {}
    jobs: list[dict[str, Any]] = []
    holders = gpu_holders()
    for tool in arguments.tools:
        dataset = copy_dataset(
            arguments.dataset, work / mode / tool / "dataset", MODES[mode], arguments.definitions
        )
        if arguments.redo:
            keep_only(dataset, unsettled_jobs(arguments.redo))
        if tool == "peer" and arguments.peer_where_ours_fails and "ours" in found:
            keep_only(dataset, failed_jobs(found["ours"]))
        tool_jobs = verdicts.planned_jobs(dataset)
        jobs = jobs or tool_jobs  # the table covers the whole set, also where the peer saw less
        logs = arguments.logs_dir / f"{mode}_{tool}" if arguments.logs_dir else dataset.parent
        logs.mkdir(parents=True, exist_ok=True)
        limit_s = tool_limit(arguments, tool)
        print(f"[{mode}] {tool}: {len(tool_jobs)} jobs, limit {limit_s:.0f} s", flush=True)
        record, found[tool] = run_tool(
            tool, dataset, work / mode / tool / "caches", arguments.gpus, limit_s, logs
        )
        record["jobs"] = len(tool_jobs)
        record["teardown_s"] = wait_for_gpu_processes(holders, TEARDOWN_LIMIT_S)  # untimed
        print(
            f"[{mode}] {tool}: {record['wall_s']:.1f} s{' (stopped at limit)' * record['timed_out']}"
            f", {record['jobs_with_verdict']}/{len(tool_jobs)} verdicts, {record['passed']} passed",
            flush=True,
        )
        if record.get("builds"):
            pool = record["builds"]
            print(
                f"[{mode}] {tool} build pool: {pool['builds']} builds {pool['by_status']} in "
                f"{pool['wall_s']:.1f} s on {pool['slots']} slots ({pool['busy_s']:.1f} s of "
                f"builds, longest {pool['longest_s']:.1f} s)",
                flush=True,
            )
        runs.append(record)
    rows = verdicts.table(jobs, found)
    return {
        "benchmark": "published_solutions",
        "mode": mode,
        "mode_description": MODE_DESCRIPTIONS[mode],
        "peer_where_ours_fails": arguments.peer_where_ours_fails,
        "dataset": dataset_summary(arguments.dataset, jobs),
        "runs": runs,
        "summary": verdicts.compare(rows, list(arguments.tools)),
        "rows": rows,
    }


def dataset_summary(dataset: Path, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    extracted = json.loads((dataset / "extracted.json").read_text())
    return {
        "source": f"{extracted['source']}@{extracted['commit']}",
        "solutions": len({job["solution"] for job in jobs}),
        "definitions": len({job["definition"] for job in jobs}),
        "jobs": len(jobs),
    }


# -- the dry run -----------------------------------------------------------------------------


def kernelarena_view(dataset: Path) -> tuple[int, str]:
    """The jobs ``kernelarena run --dataset`` plans on a GPU, and what ``validate`` says."""
    from kernelarena.datasets import load_default
    from kernelarena.evaluate.executors.runner import plan

    combined, user = load_default(dataset)
    jobs = plan(combined, sorted(user.definitions), None, "all", on_gpu=True)
    validate = subprocess.run(
        [sys.executable, "-m", "kernelarena.cli", "validate", str(dataset)],
        capture_output=True,
        text=True,
        check=False,
    )
    said = (validate.stdout + validate.stderr).strip()
    return len(jobs), f"exit {validate.returncode}: {said}"


def peer_view(dataset: Path) -> str:
    from flashinfer_bench.data import TraceSet

    trace_set = TraceSet.from_path(str(dataset))
    solutions = sum(len(s) for s in trace_set.solutions.values())
    workloads = sum(len(w) for w in trace_set.workloads.values())
    return f"{len(trace_set.definitions)} definitions, {solutions} solutions, {workloads} workloads"


def dry_run(arguments: argparse.Namespace, work: Path) -> bool:
    consistent = True
    for mode in arguments.modes:
        dataset = copy_dataset(
            arguments.dataset, work / mode / "dataset", MODES[mode], arguments.definitions
        )
        if arguments.redo:
            keep_only(dataset, unsettled_jobs(arguments.redo))
        jobs = verdicts.planned_jobs(dataset)
        planned, validated = kernelarena_view(dataset)
        print(f"[{mode}] {MODE_DESCRIPTIONS[mode]}: {len(jobs)} jobs")
        print(f"  flashinfer_bench TraceSet.from_path: {peer_view(dataset)}")
        print(f"  kernelarena validate: {validated}")
        print(f"  kernelarena plans {planned} jobs on a GPU")
        for tool in arguments.tools:
            limit_s = tool_limit(arguments, tool)
            print(f"  {tool} (limit {limit_s:.0f} s): {shown(command(tool, dataset))}")
        consistent &= planned == len(jobs) and validated.startswith("exit 0")
    return consistent


# -- main ------------------------------------------------------------------------------------


def write_results(report: dict[str, Any], results_dir: Path) -> Path:
    path = results_dir / result_path(report["benchmark"], report["environment"]).name
    path = path.with_name(f"{path.stem}_{report['mode']}{arguments_label(report)}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    path.with_suffix(".md").write_text(verdicts.markdown(report))
    return path


def arguments_label(report: dict[str, Any]) -> str:
    return f"_{report['label']}" if report.get("label") else ""


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", type=Path, default=REPO / ".fib-published")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=["first4"])
    parser.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    parser.add_argument("--definitions", nargs="+", help="only these definitions (default: all)")
    parser.add_argument("--limit-s", type=float, default=240.0, help="wall clock per tool run")
    parser.add_argument("--ours-limit-s", type=float, help="kernelarena's, if not --limit-s")
    parser.add_argument("--peer-limit-s", type=float, help="flashinfer-bench's, if not --limit-s")
    parser.add_argument(
        "--peer-where-ours-fails",
        action="store_true",
        help="run flashinfer-bench only on the solutions and workloads kernelarena did not pass",
    )
    parser.add_argument(
        "--redo",
        nargs="+",
        type=Path,
        help="only the jobs whose latest kernelarena verdict in these results files is "
        "INCORRECT_NUMERICAL or missing",
    )
    parser.add_argument("--gpus", default="0", help="CUDA_VISIBLE_DEVICES for both tools")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--logs-dir", type=Path, help="keep both tools' logs here")
    parser.add_argument("--git-rev", help="kernelarena's revision (the device has no .git)")
    parser.add_argument("--label", default="", help="suffix of the results files")
    parser.add_argument("--dry-run", action="store_true", help="check and print the commands")
    return parser.parse_args()


def main() -> None:
    arguments = parse_arguments()
    if not (arguments.dataset / "extracted.json").is_file():
        raise SystemExit(f"{arguments.dataset}: run benchmarks/published/extract.py first")
    work = Path(tempfile.mkdtemp(prefix="kernelarena-published-"))
    try:
        if arguments.dry_run:
            sys.exit(0 if dry_run(arguments, work) else 1)
        if not torch.cuda.is_available():
            raise SystemExit("needs a GPU: flashinfer-bench's runner needs CUDA (try --dry-run)")
        subprocess.run([sys.executable, "-c", PRIME_PAGE_CACHE], check=True)  # untimed
        for mode in arguments.modes:
            report = run_mode(mode, arguments, work)
            device = torch.device("cuda", 0)
            report["environment"] = environment(device) | versions(arguments.git_rev)
            report["label"] = arguments.label
            print(verdicts.short_table(report), flush=True)
            print("wrote", write_results(report, arguments.results_dir), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
