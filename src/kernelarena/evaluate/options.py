"""What a run is asked to do (Options, and a Job: one solution on one workload, in the wire format
between an executor and a judge) and how a trace is made: no torch here, so the parent process
(the command line, a Ray driver) can plan and record jobs without importing it; and the schemas
(kernelarena.data, 0.25 s) only once a trace is made, so the command line starts its workers first."""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


@dataclass
class Job:
    """One solution on one workload: what an executor sends a judge (``payload``, as a JSON-ready
    dict) and what the judge evaluates (``judge.evaluator``). Here, below both wings, since both
    use it (``executors.jobs`` re-exports it)."""

    id: int
    definition: Definition
    solution: Solution
    workload: Workload
    options: Options = field(default_factory=Options)
    blob_root: Path | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.definition.name, self.solution.name, self.workload.uuid)

    def payload(self) -> dict[str, Any]:
        return {
            "definition": self.definition.to_json_dict(),
            "solution": self.solution.to_json_dict(),
            "workload": self.workload.to_json_dict(),
            "options": asdict(self.options),
            "blob_root": str(self.blob_root) if self.blob_root else None,
        }

    @classmethod
    def from_payload(cls, job_id: int, payload: dict[str, Any]) -> Job:
        """The inverse of ``payload``."""
        from kernelarena.data import Definition, Solution, Workload

        return cls(
            job_id,
            Definition.model_validate(payload["definition"]),
            Solution.model_validate(payload["solution"]),
            Workload.model_validate(payload["workload"]),
            Options(**payload["options"]),
            Path(payload["blob_root"]) if payload.get("blob_root") else None,
        )

    def make_trace(
        self,
        environment: Environment,
        status: Status,
        log: str,
        correctness: Correctness | None = None,
        performance: Performance | None = None,
    ) -> Trace:
        """This job's trace (``make_trace``): a verdict the judge reached, or a failure the
        executor saw before or instead of one (a build's, a lost worker's, a timeout)."""
        return make_trace(
            self.definition,
            self.solution,
            self.workload,
            environment,
            status,
            log,
            correctness,
            performance,
        )


def judges_per_gpu() -> int:
    """Workers on each GPU of a local run: ``KERNELARENA_JUDGES_PER_GPU``, 1 by default. With
    more, they check side by side and measure one at a time (``judge.device_lock``)."""
    given = os.environ.get("KERNELARENA_JUDGES_PER_GPU", "1")
    try:
        count = int(given)
    except ValueError:
        raise ValueError(f"KERNELARENA_JUDGES_PER_GPU: '{given}' is not a whole number") from None
    if count < 1:
        raise ValueError(f"KERNELARENA_JUDGES_PER_GPU: {count} is less than 1")
    return count
