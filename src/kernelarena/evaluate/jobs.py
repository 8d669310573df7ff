"""A job (one solution on one workload), its result, and the time limits around it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelarena.evaluate.options import Options, make_trace

if TYPE_CHECKING:  # the command line starts its workers before it builds the schemas
    from kernelarena.data import Definition, Environment, Solution, Status, Trace, Workload


@dataclass(frozen=True)
class Timeouts:
    build_s: float = 900.0
    run_s: float = 300.0
    startup_s: float = 600.0


@dataclass
class Job:
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

    def failure_trace(self, environment: Environment, status: Status, log: str) -> Trace:
        return make_trace(self.definition, self.solution, self.workload, environment, status, log)


@dataclass
class JobResult:
    """``stages``: where the job's wall time went, in seconds by stage (``stage_clock``: the
    judge's phases and the stages nested in them, which add up to its time in the judge;
    ``idle``, the judge's wait for it; ``parent:*``, the executor's share); empty where no judge
    evaluated it (a build's failure, a lost worker)."""

    trace: Trace | None = None
    skipped: str | None = None
    device: str = ""
    stages: dict[str, float] = field(default_factory=dict)
