"""Both tools' verdicts per (solution, workload), read from what each wrote, and the table of them.

kernelarena appends a trace the moment a job ends, so its traces folder holds everything it
finished, also when it was stopped. FlashInfer-Bench 0.1.2 saves a definition's traces only once
every workload of that definition is done (``Benchmark.run_all``); what it finished of a definition
it was stopped in is read from its log instead, one line per job:
``Solution 'NAME' for workload UUID: STATUS ...``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

PASSED = "PASSED"
NOT_RUN = "-"  # the tool did not reach the job (stopped, stalled, or skipped it)
LOG_HEAD_CHARS = 300
LOG_TAIL_CHARS = 1500  # where an exception or a compiler ends up saying what went wrong
ERROR_LINE = re.compile(r"error|exception|failed|not permitted", re.IGNORECASE)
SPECIFIC_ERROR = re.compile(r"\berror\b:|Error: |not permitted")
PEER_JOB_LINE = re.compile(
    r"Solution '(?P<solution>[^']+)' for workload (?P<uuid>[0-9A-Za-z_-]+): (?P<status>[A-Z_]+)"
)
PEER_STALL_LINES = ("Health check timeout", "Failed to run workload", "Evaluation timeout")


def planned_jobs(dataset: Path) -> list[dict[str, Any]]:
    """Every (solution, workload) of the dataset folder, in FlashInfer-Trace's layout."""
    workloads: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((dataset / "workloads").rglob("*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        workloads[path.stem] = [line["workload"] for line in lines]
    jobs = []
    for path in sorted((dataset / "solutions").rglob("*.json")):
        solution = json.loads(path.read_text())
        for workload in workloads.get(solution["definition"], []):
            jobs.append(
                {
                    "definition": solution["definition"],
                    "solution": solution["name"],
                    "workload": workload["uuid"],
                    "axes": workload["axes"],
                }
            )
    return jobs


def traces_on_disk(dataset: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(solution, workload uuid) -> what the trace says, for every evaluated trace line."""
    found = {}
    for path in sorted((dataset / "traces").rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            trace = json.loads(line)
            evaluation = trace.get("evaluation")
            if not trace.get("solution") or not evaluation:
                continue
            performance = evaluation.get("performance") or {}
            correctness = evaluation.get("correctness") or {}
            found[(trace["solution"], trace["workload"]["uuid"])] = {
                "status": evaluation["status"],
                "latency_ms": performance.get("latency_ms"),
                "max_absolute_error": correctness.get("max_absolute_error"),
                "max_relative_error": correctness.get("max_relative_error"),
                **log_excerpt(evaluation.get("log") or ""),
            }
    return found


def log_excerpt(log: str) -> dict[str, Any]:
    """The head, the tail and the first lines that name an error, of a trace's log."""
    errors = [line.strip() for line in log.splitlines() if ERROR_LINE.search(line)]
    # The compiler's "error:" lines and an exception's message first, wrappers ("failed") after.
    errors.sort(key=lambda line: not SPECIFIC_ERROR.search(line))
    return {
        "log_head": log[:LOG_HEAD_CHARS],
        "log_tail": log[-LOG_TAIL_CHARS:] if len(log) > LOG_HEAD_CHARS else "",
        "error_lines": [line[:300] for line in errors[:8]],
    }


def peer_log_verdicts(log: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The peer's per-job lines, for jobs of definitions it never saved (stopped mid-way)."""
    return {
        (match["solution"], match["uuid"]): {"status": match["status"], "from": "log"}
        for match in PEER_JOB_LINE.finditer(log)
    }


def peer_stalls(log: str) -> dict[str, int]:
    return {marker: log.count(marker) for marker in PEER_STALL_LINES if marker in log}


def peer_verdicts(dataset: Path, log: str) -> dict[tuple[str, str], dict[str, Any]]:
    verdicts = peer_log_verdicts(log)
    verdicts.update(traces_on_disk(dataset))  # a saved trace says more than its log line
    return verdicts


def table(
    jobs: list[dict[str, Any]], verdicts: dict[str, dict[tuple[str, str], dict[str, Any]]]
) -> list[dict[str, Any]]:
    """One row per job: each tool's status (NOT_RUN where it has none) and its details."""
    rows = []
    for job in jobs:
        row = dict(job)
        for tool, found in verdicts.items():
            verdict = found.get((job["solution"], job["workload"]), {})
            row[tool] = verdict.get("status", NOT_RUN)
            row[f"{tool}_detail"] = {k: v for k, v in verdict.items() if k != "status"}
        rows.append(row)
    return rows


def compare(rows: list[dict[str, Any]], tools: list[str]) -> dict[str, Any]:
    """Counts per tool and, with both tools, the pairs of statuses and the disagreements."""
    summary: dict[str, Any] = {
        tool: dict(Counter(row[tool] for row in rows).most_common()) for tool in tools
    }
    if set(tools) != {"peer", "ours"}:
        return summary
    summary["pairs"] = {
        f"{peer} / {ours}": count
        for (peer, ours), count in Counter((r["peer"], r["ours"]) for r in rows).most_common()
    }
    summary["peer_passes_ours_fails"] = [
        key(row) for row in rows if row["peer"] == PASSED and row["ours"] not in (PASSED, NOT_RUN)
    ]
    summary["peer_passes_ours_not_run"] = [
        key(row) for row in rows if row["peer"] == PASSED and row["ours"] == NOT_RUN
    ]
    summary["ours_passes_peer_fails"] = [
        key(row) for row in rows if row["ours"] == PASSED and row["peer"] not in (PASSED, NOT_RUN)
    ]
    return summary


def key(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "solution": row["solution"],
        "workload": row["workload"],
        "axes": row["axes"],
        "peer": row["peer"],
        "ours": row["ours"],
        "ours_log": telling_line(row["ours_detail"]),
    }


def telling_line(detail: dict[str, Any]) -> str:
    """The line that says most about a failure: the first naming an error, else the last."""
    if detail.get("error_lines"):
        return str(detail["error_lines"][0])
    lines = (detail.get("log_tail") or detail.get("log_head") or "").strip().splitlines()
    return lines[-1][:300] if lines else ""


def markdown(report: dict[str, Any]) -> str:
    """The summary a reader sees first: the runs, the status pairs and every job the peer passes
    and kernelarena does not."""
    env = report["environment"]
    lines = [
        f"# Published solutions, {report['mode']}: {env.get('device')}, {env['date'][:10]}",
        "",
        f"Dataset: {report['dataset']['solutions']} solutions x their definitions' workloads "
        f"({report['mode_description']}), {report['dataset']['jobs']} jobs; flashinfer-bench "
        f"{env.get('flashinfer_bench')}, kernelarena {env.get('kernelarena_git_rev')}, torch "
        f"{env.get('torch')}.",
        "",
        "| tool | wall s | limit s | stopped at limit | exit | jobs with a verdict | passed |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in report["runs"]:
        lines.append(
            f"| {run['tool']} | {run['wall_s']:.1f} | {run['limit_s']:.0f} | "
            f"{'yes' if run['timed_out'] else 'no'} | {run['returncode']} | "
            f"{run['jobs_with_verdict']}/{run.get('jobs', report['dataset']['jobs'])} | "
            f"{run['passed']} |"
        )
        if run.get("stalls"):
            lines.append(f"|  | stall lines in its log: {run['stalls']} | | | | | |")
    summary = report["summary"]
    if "pairs" in summary:
        lines += ["", "| flashinfer-bench / kernelarena | jobs |", "| --- | --- |"]
        lines += [f"| {pair} | {count} |" for pair, count in summary["pairs"].items()]
        lines += ["", "## flashinfer-bench passes, kernelarena does not", ""]
        failing = summary["peer_passes_ours_fails"]
        lines += [
            f"- {r['solution']} {r['axes']} ({r['workload']}): {r['ours']}: {r['ours_log']}"
            for r in failing
        ] or ["none among the jobs both tools finished"]
        unreached = summary["peer_passes_ours_not_run"]
        if unreached:
            lines.append(f"- and {len(unreached)} job(s) kernelarena did not reach")
    return "\n".join(lines) + "\n"


def short_table(report: dict[str, Any]) -> str:
    """What the GPU command prints last: the runs, the pairs, and the jobs the peer passes that
    kernelarena fails."""
    env = report["environment"]
    lines = [
        f"== {report['mode']}: {report['dataset']['jobs']} jobs on {env.get('device')}",
        f"{'tool':<5} {'jobs':>5} {'wall s':>7} {'limit':>6} {'stopped':>7} {'verdicts':>9} "
        f"{'passed':>7}",
    ]
    for run in report["runs"]:
        lines.append(
            f"{run['tool']:<5} {run['jobs']:>5} {run['wall_s']:7.1f} {run['limit_s']:6.0f} "
            f"{'yes' if run['timed_out'] else 'no':>7} {run['jobs_with_verdict']:>9} "
            f"{run['passed']:>7}"
        )
        if run.get("stalls"):
            lines.append(f"      peer stall lines: {run['stalls']}")
    summary = report["summary"]
    lines += [f"  peer / ours  {pair}: {count}" for pair, count in summary.get("pairs", {}).items()]
    lines += [
        f"  peer PASSED, ours {row['ours']}: {row['solution']} {row['axes']} {row['ours_log']}"
        for row in summary.get("peer_passes_ours_fails", [])
    ]
    return "\n".join(lines)
