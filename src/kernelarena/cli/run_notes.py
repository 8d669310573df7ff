"""What ``kernelarena run`` says: before any job, what its plan leaves out and why (and, when
nothing is left to run, the cause: no solution registered, no workload in the suite, ...); after,
the results (on a CPU as checks, not rankings), the closing line and the exit status."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from kernelarena.cli.common import say
from kernelarena.evaluate.judge.worker import describe_startup

if TYPE_CHECKING:
    from kernelarena.data import Definition, TraceSet
    from kernelarena.evaluate.executors.runner import Plan, RunSummary
    from kernelarena.evaluate.options import Options

LISTED = 5  # left-out solutions named one by one; past this, grouped by reason


def print_left_out(made: Plan, trace_set: TraceSet, out: Console) -> None:
    """Solutions that cannot run here (one line each, or one per reason when many), and the
    workloads rejected as the user's errors (always one line each: they need fixing)."""
    from kernelarena.evaluate.executors.runner import workload_where

    if len(made.skipped) <= LISTED:
        for definition, solution, why in made.skipped:
            say(out, f"skipped {solution.name} ({definition.name}): {why}", "yellow")
    else:
        by_reason: dict[str, list[str]] = defaultdict(list)
        for _, solution, why in made.skipped:
            by_reason[why].append(solution.name)
        for why, names in sorted(by_reason.items()):
            examples = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            say(out, f"skipped {len(names)} solutions ({examples}): {why}", "yellow")
    for definition, workload, why in made.rejected:
        where = workload_where(trace_set, definition, workload)
        say(out, f"not run, {where} is wrong: {why}", "red")


def why_nothing_runs(
    trace_set: TraceSet,
    definitions: Sequence[Definition],
    made: Plan,
    suite: str,
    on_gpu: bool,
    listed: int = 10,
) -> list[str]:
    """One line per chosen definition (up to ``listed``): why it has no job."""
    lines = [_why_no_job(trace_set, d, made, suite, on_gpu) for d in definitions[:listed]]
    if len(definitions) > listed:
        lines.append(f"... and {len(definitions) - listed} more definitions")
    return lines


def _why_no_job(
    trace_set: TraceSet, definition: Definition, made: Plan, suite: str, on_gpu: bool
) -> str:
    from kernelarena.evaluate.executors.runner import NO_SOLUTION_HINT, select_workloads

    name = definition.name
    solutions = trace_set.solutions_for(name)
    if not solutions:
        return f"{name} has no solution: {NO_SOLUTION_HINT}"
    if all(s.name in {skipped.name for _, skipped, _ in made.skipped} for s in solutions):
        return f"{name}: none of its {_count(solutions, 'solution')} can run here (see above)"
    every = trace_set.workloads.get(name, [])
    runnable = trace_set.workloads_for(name)
    if not every:
        return (
            f"{name} has no workload: add one (TraceSet.add_workload, or a line in "
            f"workloads/{definition.op_type}/{name}.jsonl)"
        )
    if not runnable:
        return f"{name}: the safetensors blobs of its {_count(every, 'workload')} are missing"
    chosen = select_workloads(runnable, suite, on_gpu)
    if not chosen:
        tags = sorted({t for w in runnable for t in w.tags or []})
        if not on_gpu and all({"large", "performance"} & set(w.tags or []) for w in runnable):
            return (
                f"{name}: each of its {_count(runnable, 'workload')} is tagged large or "
                "performance, which run only on a GPU"
            )
        if not on_gpu and "performance" in tags and suite == "performance":
            return (
                f"{name}: its performance workloads run only on a GPU; on this CPU, "
                "try --suite all (its correctness and smoke workloads)"
            )
        return (
            f"{name}: none of its {_count(runnable, 'workload')} is in the {suite} suite (their "
            f"tags: {', '.join(tags)}); try --suite all"
        )
    return f"{name}: every workload of the {suite} suite was rejected (see above)"


def json_summary(summary: RunSummary, made: Plan) -> dict[str, Any]:
    return {
        "environments": summary.environments,
        "traces": [t.to_json_dict() for t in summary.traces],
        "skipped": [
            {"solution": j.solution.name, "workload": j.workload.uuid, "reason": r}
            for j, r in summary.skipped
        ]
        + [{"solution": s.name, "workload": None, "reason": r} for _, s, r in made.skipped],
        "rejected": [
            {"definition": d.name, "workload": w.uuid, "reason": r} for d, w, r in made.rejected
        ],
        "resumed": summary.resumed,
        "builds": summary.builds,
        "stages": summary.stages,
        "job_stages": summary.job_stages,
    }


def _count(items: Sequence[object], noun: str) -> str:
    return f"{len(items)} {noun}" + ("" if len(items) == 1 else "s")


def print_results(combined: TraceSet, summary: RunSummary, on_gpu: bool, console: Console) -> None:
    from kernelarena.report.console import failure_details, run_tables

    for environment in summary.environments:
        line = f"{environment['device']}: {environment['hardware']}"
        ceilings = environment.get("ceilings") or {}
        if on_gpu:
            line += (
                f"; copy {ceilings.get('copy_gbps', 0):.0f} GB/s, "
                f"matmul {ceilings.get('matmul_tflops', 0):.1f} TFLOP/s"
            )
        say(console, line)
        if environment.get("startup"):
            say(console, f"  worker start-up {describe_startup(environment['startup'])}")
    if not on_gpu and summary.traces:
        say(console, CPU_CHECKS)
    run_tables(combined, summary.traces, summary.skipped, console, checks_only=not on_gpu)
    failure_details(summary.traces, console)


def cpu_check_options(options: Options) -> Options:
    """The solution process's own timing loop on a CPU, where times check and rank nothing: under
    Triton's interpreter a call takes 10 ms to 1 s, and the GPU defaults (3 warm-up calls, at
    least 10 timed) cost most of a minute per nvfp4 job on a two-core machine."""
    return replace(options, warmup=1, min_iterations=3, max_iterations=20, budget_ms=20.0)


CPU_CHECKS = (
    "CPU times are checks, not rankings: a CPU runs references and Triton's interpreter, not the "
    "GPU kernels, so no speedup or share of a ceiling is shown for them."
)


def finish(summary: RunSummary, made: Plan, out: Console, allow_failures: bool) -> None:
    """The closing line, and the exit status: 1 for a failed solution (unless allowed) or a
    workload rejected as wrong."""
    from kernelarena.evaluate.executors.runner import failed_statuses

    counts = failed_statuses(summary)
    passed = sum(t.passed for t in summary.traces)
    rejected = f", {len(made.rejected)} workloads rejected" if made.rejected else ""
    say(
        out,
        f"{passed} passed, {len(summary.failures)} failed "
        f"({', '.join(f'{k.value} {v}' for k, v in counts.items()) or 'none'}), "
        f"{len(summary.skipped) + len(made.skipped)} skipped{rejected}, "
        f"{summary.resumed} already done",
    )
    if (summary.failures and not allow_failures) or made.rejected:
        raise typer.Exit(1)
