"""Plan jobs (solution x workload), skip those already done, run them, append each trace as it comes.

Nothing lost: every trace is appended and flushed to the dataset the moment it arrives, so a run killed
at any point loses at most the jobs in flight; ``resume`` skips every job whose trace is already on disk
with the same definition, solution and workload hashes on the same hardware, so none is done twice.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kernelarena.data import (
    Definition,
    Language,
    Solution,
    Status,
    Trace,
    TraceHashes,
    TraceSet,
    Workload,
)
from kernelarena.evaluate.executors.devices import host_gpus
from kernelarena.evaluate.executors.job_stages import StageTotals, job_record
from kernelarena.evaluate.executors.jobs import Job, JobResult
from kernelarena.evaluate.options import Options
from kernelarena.runtime.names import UnknownNames, definitions_named

SUITES = ("smoke", "correctness", "performance", "all")


class Executor(Protocol):
    def start(self) -> list[dict[str, Any]]: ...
    def run(self, jobs: Sequence[Job], on_result: Callable[[Job, JobResult], None]) -> None: ...
    def close(self) -> None: ...


class PlanError(ValueError):
    """Names or filters that match nothing in the dataset."""


@dataclass
class RunSummary:
    traces: list[Trace] = field(default_factory=list)
    skipped: list[tuple[Job, str]] = field(default_factory=list)
    resumed: int = 0
    environments: list[dict[str, Any]] = field(default_factory=list)
    builds: dict[str, Any] = field(default_factory=dict)  # the build pool's (``BuildPool.summary``)
    # Where the jobs' time went, by device (``job_stages.StageTotals.as_json``).
    stages: dict[str, Any] = field(default_factory=dict)
    # Each judged job's own stages, in the order they finished (``job_stages.job_record``).
    job_stages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failures(self) -> list[Trace]:
        return [t for t in self.traces if not t.passed]


def select_definitions(trace_set: TraceSet, names: Sequence[str] | None) -> list[Definition]:
    """Names match a definition, a family (``rmsnorm`` -> rmsnorm_bf16, ...) or an op_type
    (``runtime.names``); one that matches nothing is a PlanError naming it."""
    try:
        return definitions_named(trace_set, names)
    except UnknownNames as error:
        raise PlanError(str(error)) from error


def select_workloads(workloads: Iterable[Workload], suite: str, on_gpu: bool) -> list[Workload]:
    """A suite is a workload tag (smoke, correctness, performance, or any of a dataset's own) or 'all';
    untagged workloads belong to every suite. Without a GPU, 'large' and 'performance' ones are left out."""
    if not suite:
        raise PlanError(f"--suite: give one of {', '.join(SUITES)} or a workload tag")
    chosen = []
    for workload in workloads:
        tags = set(workload.tags or [])
        if not on_gpu and tags & {"large", "performance"}:
            continue
        if suite != "all" and tags and suite not in tags:
            continue
        chosen.append(workload)
    return chosen


def solution_matches(solution: Solution, filters: Sequence[str] | None) -> bool:
    if not filters:
        return True
    suffix = solution.name.removeprefix(solution.definition + "_")
    return any(f in (solution.name, suffix, solution.spec.language.value) for f in filters)


@dataclass
class Plan:
    """The jobs, and what was left out before any solution ran, with why."""

    jobs: list[Job] = field(default_factory=list)
    skipped: list[tuple[Definition, Solution, str]] = field(default_factory=list)  # can't run here
    rejected: list[tuple[Definition, Workload, str]] = field(default_factory=list)  # user's errors


def plan(
    trace_set: TraceSet,
    names: Sequence[str] | None = None,
    solutions: Sequence[str] | None = None,
    suite: str = "smoke",
    on_gpu: bool = False,
    options: Options | None = None,
) -> list[Job]:
    """The jobs of ``make_plan``; what it leaves out is warned about (the Python API's answer)."""
    made = make_plan(trace_set, names, solutions, suite, on_gpu, options)
    for definition, workload, why in made.rejected:
        warnings.warn(f"{workload_where(trace_set, definition, workload)}: {why}", stacklevel=2)
    for definition in select_definitions(trace_set, names):
        if not trace_set.solutions_for(definition.name):
            warnings.warn(f"'{definition.name}' has no solution: {NO_SOLUTION_HINT}", stacklevel=2)
    return made.jobs


NO_SOLUTION_HINT = (
    "import the module that calls kernelarena.register for it (kernelarena run --import MODULE), "
    "or add solutions/<op_type>/<definition>/<name>.json to the dataset"
)


def make_plan(
    trace_set: TraceSet,
    names: Sequence[str] | None = None,
    solutions: Sequence[str] | None = None,
    suite: str = "smoke",
    on_gpu: bool = False,
    options: Options | None = None,
    memory_bytes: int | None = None,
) -> Plan:
    """Jobs solution by solution (each runs in a sandbox process of its own, started once and kept
    for all its workloads). Left out, with the reason: solutions whose target hardware is not
    here, and workloads that cannot run at all (axes that do not resolve, inputs that do not
    match the definition, tensors larger than the device's ``memory_bytes``)."""
    options = options or Options()
    if memory_bytes is None:
        memory_bytes = device_memory_bytes(on_gpu)
    made = Plan()
    runnable = 0  # solutions chosen that can run here
    for definition in select_definitions(trace_set, names):
        candidates = []
        for solution in trace_set.solutions_for(definition.name):
            if not solution_matches(solution, solutions):
                continue
            why = left_out_here(solution, on_gpu)
            if why:
                made.skipped.append((definition, solution, why))
            else:
                candidates.append(solution)
        runnable += len(candidates)
        workloads = []
        for workload in select_workloads(trace_set.workloads_for(definition.name), suite, on_gpu):
            why = workload_error(trace_set, definition, workload, memory_bytes)
            if why:
                made.rejected.append((definition, workload, why))
            else:
                workloads.append(workload)
        for solution in candidates:
            for workload in workloads:
                root = trace_set.blob_roots.get(workload.uuid, trace_set.root)
                made.jobs.append(
                    Job(
                        len(made.jobs),
                        definition,
                        solution,
                        workload,
                        options,
                        Path(root) if root else None,
                    )
                )
    if solutions and not runnable:
        raise PlanError(_no_solution_matches(trace_set, names, solutions, made))
    return made


def _no_solution_matches(
    trace_set: TraceSet, names: Sequence[str] | None, solutions: Sequence[str], made: Plan
) -> str:
    reasons = "".join(f"; {s.name} {why}" for _, s, why in made.skipped)
    known = sorted(
        s.name
        for d in select_definitions(trace_set, names)
        for s in trace_set.solutions_for(d.name)
    )
    listed = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "") if known else "none"
    return (
        f"--solutions {','.join(solutions)} match no solution of the chosen definitions that can "
        f"run here{reasons}; their solutions: {listed} (one registered from Python needs "
        "--import MODULE)"
    )


def left_out_here(solution: Solution, on_gpu: bool) -> str:
    """Why the solution is not run on this machine, or '' (CUDA and C++ build without a GPU)."""
    if on_gpu or solution.runs_on("cpu") or solution.spec.language in (Language.CUDA, Language.CPP):
        return ""
    return f"targets {', '.join(solution.spec.target_hardware) or 'nothing'}; no GPU here"


def workload_error(
    trace_set: TraceSet, definition: Definition, workload: Workload, memory_bytes: int | None
) -> str:
    """Why a workload cannot run at all (the user's error, not a solution's), or ''."""
    problems = trace_set.workload_problems(definition, workload)
    if problems:
        return "; ".join(f"{where}: {what}" for where, what in problems)
    if memory_bytes:
        axes = definition.resolve_axes(workload.axes)
        needed = sum(definition.nbytes(n, axes) for n in (*definition.inputs, *definition.outputs))
        if needed > memory_bytes:
            return (
                f"its inputs and outputs alone take {needed / 1e9:.4g} GB, more than the "
                f"{memory_bytes / 1e9:.4g} GB of memory of this device"
            )
    return ""


def workload_where(trace_set: TraceSet, definition: Definition, workload: Workload) -> str:
    origin = trace_set.origin.get(f"workload:{workload.uuid}", "")
    return f"workload '{workload.uuid}' of {definition.name}" + (f" ({origin})" if origin else "")


def device_memory_bytes(on_gpu: bool) -> int | None:
    """The smallest GPU's memory (nvidia-smi, so no torch here), else this machine's; None when
    unknown."""
    if on_gpu:
        gpus = host_gpus()
        return min(gpu.memory_mib for gpu in gpus) * 2**20 if gpus else None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        return None


def completed(
    traces: Iterable[Trace], jobs: Sequence[Job], hardware: set[str]
) -> set[tuple[str, str, str]]:
    """Keys of jobs whose trace exists with today's hashes, on this hardware."""
    wanted = {job.key: job for job in jobs}
    done = set()
    for trace in traces:
        if trace.solution is None or trace.evaluation is None or trace.hashes is None:
            continue
        job = wanted.get((trace.definition, trace.solution, trace.workload.uuid))
        if job is None or trace.evaluation.environment.hardware not in hardware:
            continue
        if trace.hashes == TraceHashes.of(job.definition, job.solution, job.workload):
            done.add(job.key)
    return done


def run_jobs(
    jobs: Sequence[Job],
    executor: Executor,
    output: TraceSet | None,
    *,
    resume: bool = False,
    on_progress: Callable[[Job, JobResult | None], None] | None = None,
) -> RunSummary:
    summary = RunSummary()
    summary.environments = executor.start()
    if resume and output is not None:
        hardware = {e["hardware"] for e in summary.environments}
        existing = [t for traces in output.traces.values() for t in traces]
        done = completed(existing, jobs, hardware)
        summary.resumed = len(done)
        for job in jobs:
            if job.key in done and on_progress is not None:
                on_progress(job, None)
        jobs = [j for j in jobs if j.key not in done]

    totals = StageTotals()

    def record(job: Job, result: JobResult) -> None:
        began = time.perf_counter()
        if result.trace is not None:
            if output is not None:
                # Index the definition so the trace lands in traces/<op_type>/ of the output folder,
                # also for definitions that live elsewhere (the built-in library).
                output.definitions.setdefault(job.definition.name, job.definition)
                output.append_trace(result.trace)
            summary.traces.append(result.trace)
        elif result.skipped is not None:
            summary.skipped.append((job, result.skipped))
        written = time.perf_counter()
        if on_progress is not None:
            on_progress(job, result)
        if result.stages:
            parent = {
                "parent:trace_write": written - began,
                "parent:progress": time.perf_counter() - written,
            }
            totals.add(result.device, {**result.stages, **parent})
            summary.job_stages.append(job_record(job, result, time.time()))

    try:
        executor.run(jobs, record)
    finally:
        summary.builds = dict(getattr(executor, "build_summary", None) or {})
        summary.stages = totals.as_json()
    return summary


def failed_statuses(summary: RunSummary) -> dict[Status, int]:
    counts: dict[Status, int] = {}
    for trace in summary.failures:
        assert trace.evaluation is not None
        counts[trace.evaluation.status] = counts.get(trace.evaluation.status, 0) + 1
    return counts
