"""Which job a free worker of the local executor takes next."""

from __future__ import annotations

from collections import deque
from itertools import pairwise
from types import SimpleNamespace

from kernelarena.evaluate.executors.jobs import Job, JobTaker
from kernelarena.evaluate.executors.local import LocalExecutor, _Worker
from kernelarena.evaluate.executors.runner import plan
from kernelarena.evaluate.options import Options
from tests.evaluate.bad_solutions import solution, trace_set


def _waiting_worker(device: str, solution: str | None, busy: Job | None) -> _Worker:
    worker = _Worker(device, process=None, conn=None, log_path="")  # type: ignore[arg-type]
    worker.solution, worker.job = solution, busy
    return worker


def test_a_free_worker_takes_a_solution_no_other_worker_is_on() -> None:
    made = trace_set({}, sizes=(100, 200, 300))
    made.add_solution(solution("slow_good", True))
    jobs = plan(made, options=Options())
    names = [j.solution.name for j in jobs]
    first, second = names[0], names[-1]
    assert first != second
    executor = LocalExecutor(["cpu", "cpu"], build_pool=False)
    busy = _waiting_worker("cpu", first, jobs[0])
    free = _waiting_worker("cpu", None, None)
    executor._workers = [busy, free]
    executor._queue = deque(jobs[1:])

    taken = executor._take(free)
    assert taken is not None and taken.solution.name == second  # not the next of ``first``
    free.solution, free.job = second, taken
    again = executor._take(free)
    assert again is not None and again.solution.name == second  # its own solution's next
    executor._queue = deque(j for j in executor._queue if j.solution.name == first)
    shared = executor._take(free)
    assert shared is not None and shared.solution.name == first  # the last one, shared


def _fake_jobs(solutions: int, workloads: int, definition: str = "d") -> list[Job]:
    """Jobs as ``JobTaker`` reads them (names only), in the runner's order: solution-major."""
    return [
        SimpleNamespace(  # type: ignore[misc]
            definition=SimpleNamespace(name=definition),
            solution=SimpleNamespace(name=f"{definition}-s{s}"),
            workload=SimpleNamespace(uuid=f"w{w}"),
        )
        for s in range(solutions)
        for w in range(workloads)
    ]


def _taken_in_turns(jobs: list[Job], workers: int) -> dict[int, list[Job]]:
    """Each worker's jobs, the workers taking one job each in turn, each busy on its last."""
    taker, queue = JobTaker(jobs), deque(jobs)
    taken: dict[int, list[Job]] = {w: [] for w in range(workers)}
    while queue:
        for worker in range(workers):
            own = taken[worker][-1].solution.name if taken[worker] else None
            others = {taken[o][-1].solution.name for o in taken if o != worker and taken[o]}
            job = taker.take(queue, worker, own, others, lambda _: True)
            if job is not None:
                taken[worker].append(job)
    return taken


def test_workers_split_a_definition_of_many_workloads_by_workload() -> None:
    """Each workload's draws, reference outputs and reference timing are one worker's: no
    workload is judged by two, while each worker starts a sandbox per solution at most."""
    taken = _taken_in_turns(_fake_jobs(solutions=3, workloads=12), workers=2)
    judged_by: dict[str, set[int]] = {}
    for worker, jobs in taken.items():
        for job in jobs:
            judged_by.setdefault(job.workload.uuid, set()).add(worker)
        switches = sum(1 for a, b in pairwise(jobs) if a.solution.name != b.solution.name)
        assert switches + 1 <= 3
    assert all(len(workers) == 1 for workers in judged_by.values())
    assert sorted(len(jobs) for jobs in taken.values()) == [18, 18]


def test_a_definition_of_few_workloads_keeps_each_worker_on_its_solution() -> None:
    """A published dataset's shape (many solutions, four workloads): a split would cost more
    sandboxes than draws, so workers take whole solutions (``by_solution``)."""
    jobs = _fake_jobs(solutions=6, workloads=4)
    assert not JobTaker(jobs).split
    for worker_jobs in _taken_in_turns(jobs, workers=2).values():
        solutions = [job.solution.name for job in worker_jobs]
        assert all(solutions.count(name) == 4 for name in set(solutions))  # whole solutions


def test_a_worker_keeps_its_solution_of_an_unsplit_definition_beside_a_split_one() -> None:
    """A split definition's free workloads do not pull a worker off a solution it still has jobs
    of (each switch costs a sandbox, here and for whoever takes the solution on)."""
    published = _fake_jobs(solutions=6, workloads=4, definition="published")
    library = _fake_jobs(solutions=3, workloads=12, definition="library")
    taker = JobTaker(published + library)
    assert taker.split == {"library"}
    queue = deque(library + published[1:4])  # published-s0's last three jobs, after the library's
    taken = taker.take(queue, 0, "published-s0", set(), lambda _: True)
    assert taken is not None and taken.solution.name == "published-s0"
