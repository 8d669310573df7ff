"""What a run is asked to do (Options) and how a trace is made: no torch here, so the parent process
(the command line, a Ray driver) can plan and record jobs without importing it; and the schemas
(kernelarena.data, 0.25 s) only once a trace is made, so the command line starts its workers first."""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelarena.data import (
        Correctness,
        Definition,
        Environment,
        Performance,
        Solution,
        Status,
        Trace,
        Workload,
    )


@dataclass
class Options:
    trials: int = 3
    timing: bool = True
    warmup: int = 3
    max_iterations: int = 100
    min_iterations: int = 10
    budget_ms: float = 100.0
    graph_below_us: float = 100.0
    keep_samples: bool = True
    # False: time with CUDA events only, never capturing a graph (the judge's retry of a solution
    # whose failed capture broke its process, or a user's choice).
    allow_graph: bool = True
    # A request to a definition's reference (a set's outputs, its make_inputs, its timing) that
    # runs longer fails the job as the dataset's (``references.ReferenceFailed``): below the
    # job's own time limit, so that a hanging reference is never the solution's TIMEOUT.
    reference_timeout_s: float = 60.0


def within_job_time(options: Options, run_s: float) -> Options:
    """``options`` with a reference's requests limited to half the job's time at most, so that a
    hanging reference is reported as the dataset's before the job's limit makes it a TIMEOUT."""
    return replace(options, reference_timeout_s=min(options.reference_timeout_s, run_s / 2))


REFERENCES_UNCONFINED = (
    "kernelarena: KERNELARENA_REFERENCE_SANDBOX=0: definitions' references and make_inputs run "
    "in the judge, unconfined, with your rights, files and network"
)


def references_sandboxed() -> bool:
    """Whether references run in sandboxes of their own (``evaluate.judge.references``): unless
    ``KERNELARENA_REFERENCE_SANDBOX=0`` (a diagnosis) or ``KERNELARENA_UNCONFINED=1`` (every wall
    down) keeps them in the judge."""
    return (
        os.environ.get("KERNELARENA_REFERENCE_SANDBOX", "1") != "0"
        and os.environ.get("KERNELARENA_UNCONFINED") != "1"
    )


def where_references_run() -> str:
    """A line for ``kernelarena doctor``."""
    if os.environ.get("KERNELARENA_UNCONFINED") == "1":
        return "in the judge, unconfined (KERNELARENA_UNCONFINED=1)"
    if not references_sandboxed():
        return "in the judge, UNCONFINED (KERNELARENA_REFERENCE_SANDBOX=0)"
    return "in a sandbox of their own, one per definition per judge, confined as a solution's"


def make_trace(
    definition: Definition,
    solution: Solution,
    workload: Workload,
    environment: Environment,
    status: Status,
    log: str,
    correctness: Correctness | None = None,
    performance: Performance | None = None,
) -> Trace:
    from kernelarena.data import Correctness, Evaluation, Status, Trace, TraceHashes

    if status in (Status.PASSED, Status.INCORRECT_NUMERICAL) and correctness is None:
        correctness = Correctness()
    evaluation = Evaluation(
        status=status,
        environment=environment,
        timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"),
        log=log[-8000:],
        correctness=correctness,
        performance=performance if status is Status.PASSED else None,
    )
    return Trace(
        definition=definition.name,
        workload=workload,
        solution=solution.name,
        evaluation=evaluation,
        hashes=TraceHashes.of(definition, solution, workload),
    )
