"""Plan jobs (solution x workload), skip those already done, run them, append each trace as it comes.

Nothing lost: every trace is appended and flushed to the dataset the moment it arrives, so a run killed
at any point loses at most the jobs in flight; ``resume`` skips every job whose trace is already on disk
with the same definition, solution and workload hashes on the same hardware, so none is done twice.
"""

from __future__ import annotations

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
from kernelarena.evaluate.jobs import Job, JobResult
from kernelarena.evaluate.options import Options

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

    @property
    def failures(self) -> list[Trace]:
        return [t for t in self.traces if not t.passed]


def select_definitions(trace_set: TraceSet, names: Sequence[str] | None) -> list[Definition]:
    """Names match a definition, a family (``rmsnorm`` -> rmsnorm_bf16, ...) or an op_type."""
    if not names:
        return list(trace_set.definitions.values())
    chosen: dict[str, Definition] = {}
    for name in names:
        matches = [
            d
            for d in trace_set.definitions.values()
            if name in (d.name, d.op_type) or f"family:{name}" in d.tags
        ]
        if not matches:
            known = sorted({d.name for d in trace_set.definitions.values()})
            raise PlanError(
                f"'{name}' matches no definition, family or op_type; known definitions: {', '.join(known)}"
            )
        chosen.update((d.name, d) for d in matches)
    return list(chosen.values())


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


def plan(
    trace_set: TraceSet,
    names: Sequence[str] | None = None,
    solutions: Sequence[str] | None = None,
    suite: str = "smoke",
    on_gpu: bool = False,
    options: Options | None = None,
) -> list[Job]:
    options = options or Options()
    jobs: list[Job] = []
    for definition in select_definitions(trace_set, names):
        candidates = [
            s
            for s in trace_set.solutions_for(definition.name)
            if solution_matches(s, solutions)
            and (on_gpu or s.runs_on("cpu") or s.spec.language in (Language.CUDA, Language.CPP))
        ]
        workloads = select_workloads(trace_set.workloads_for(definition.name), suite, on_gpu)
        # Solution by solution: each solution runs in a sandbox process of its own, started once
        # and kept for all its workloads.
        for solution in candidates:
            for workload in workloads:
                root = trace_set.blob_roots.get(workload.uuid, trace_set.root)
                jobs.append(
                    Job(
                        len(jobs),
                        definition,
                        solution,
                        workload,
                        options,
                        Path(root) if root else None,
                    )
                )
    if solutions and not jobs:
        raise PlanError(
            f"--solutions {list(solutions)} match no solution of the chosen definitions"
        )
    return jobs


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

    def record(job: Job, result: JobResult) -> None:
        if result.trace is not None:
            if output is not None:
                # Index the definition so the trace lands in traces/<op_type>/ of the output folder,
                # also for definitions that live elsewhere (the built-in library).
                output.definitions.setdefault(job.definition.name, job.definition)
                output.append_trace(result.trace)
            summary.traces.append(result.trace)
        elif result.skipped is not None:
            summary.skipped.append((job, result.skipped))
        if on_progress is not None:
            on_progress(job, result)

    executor.run(jobs, record)
    return summary


def failed_statuses(summary: RunSummary) -> dict[Status, int]:
    counts: dict[Status, int] = {}
    for trace in summary.failures:
        assert trace.evaluation is not None
        counts[trace.evaluation.status] = counts.get(trace.evaluation.status, 0) + 1
    return counts
