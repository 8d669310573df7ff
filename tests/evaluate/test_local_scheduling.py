"""Which job a free worker of the local executor takes next."""

from __future__ import annotations

from collections import deque

from kernelarena.evaluate.executors.jobs import Job
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
