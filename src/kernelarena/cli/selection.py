"""Which definitions a command is about (``kernelarena run``, ``kernelarena report``): the names
given, else a dataset's own definitions and jobs, else everything."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelarena.data import TraceSet
    from kernelarena.evaluate.executors.jobs import Job
    from kernelarena.evaluate.executors.runner import Plan


@dataclass(frozen=True)
class Selection:
    """Which definitions a command is about, and for definitions the dataset adds workloads or
    solutions to without defining them, which jobs are its own."""

    names: list[str] | None
    own_jobs: dict[str, tuple[set[str], set[str]]]  # definition -> (solutions, workload uuids)

    def keeps(self, job: Job) -> bool:
        limit = self.own_jobs.get(job.definition.name)
        return limit is None or job.solution.name in limit[0] or job.workload.uuid in limit[1]

    def limit(self, made: Plan) -> None:
        """Keep only the dataset's own jobs, and what it left out of those."""
        made.jobs = [job for job in made.jobs if self.keeps(job)]
        made.skipped = [
            (d, s, why)
            for d, s, why in made.skipped
            if d.name not in self.own_jobs or s.name in self.own_jobs[d.name][0]
        ]
        made.rejected = [
            (d, w, why)
            for d, w, why in made.rejected
            if d.name not in self.own_jobs or w.uuid in self.own_jobs[d.name][1]
        ]


def dataset_selection(
    user: TraceSet,
    names: list[str] | None,
    dataset: str | None,
    library: bool,
    command: str = "run",
    with_traces: bool = False,
) -> Selection:
    """Names choose; without names, ``--dataset D`` means D's own definitions (those it defines,
    and those it holds workloads or solutions for: only those jobs; ``with_traces``: and those
    it holds traces of), and the built-in library joins only with ``--library``. Without
    either, everything (the library and the default dataset), as before."""
    if names or not dataset or library:
        return Selection(names or None, {})
    own: dict[str, tuple[set[str], set[str]]] = {}
    if with_traces:
        for definition in user.traces:
            own.setdefault(definition, (set(), set()))
    for solution in user.solutions.values():
        if solution.definition not in user.definitions:
            own.setdefault(solution.definition, (set(), set()))[0].add(solution.name)
    for definition, workloads in user.workloads.items():
        if definition not in user.definitions and workloads:
            own.setdefault(definition, (set(), set()))[1].update(w.uuid for w in workloads)
    chosen = sorted(set(user.definitions) | set(own))
    if not chosen:
        raise ValueError(
            f"--dataset {dataset}: {user.root} holds no definitions, workloads or solutions; name "
            f"what to {command} (kernelarena {command} rmsnorm --dataset {dataset}) or add "
            "--library for the built-in library"
        )
    return Selection(chosen, own)
