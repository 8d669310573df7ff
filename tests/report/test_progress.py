"""Progress of a run: counts, the job at work, the time left, and plain lines when not a terminal."""

from __future__ import annotations

import io
import time

from rich.console import Console

from kernelarena.data import Performance, Status
from kernelarena.evaluate.executors.jobs import Job, JobResult
from kernelarena.evaluate.options import make_trace
from kernelarena.report.progress import RunProgress, duration, plan_summary
from tests.report.synthetic import H100, definition, environment, solution, workload


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _jobs() -> list[Job]:
    made = definition("toy_norm")
    solutions = [solution("toy_norm", "triton", "triton"), solution("toy_norm", "torch", "python")]
    shapes = [workload(128, 4096), workload(4096, 4096)]
    return [
        Job(i, made, solved, shape)
        for i, (solved, shape) in enumerate((s, w) for s in solutions for w in shapes)
    ]


def _result(job: Job, status: Status) -> JobResult:
    timed = Performance(latency_ms=0.01) if status is Status.PASSED else None
    trace = make_trace(
        job.definition, job.solution, job.workload, environment(H100), status, "", None, timed
    )
    return JobResult(trace=trace)


def test_counts_the_job_at_work_and_the_time_left() -> None:
    jobs, clock = _jobs(), Clock()
    progress = RunProgress(jobs, Console(file=io.StringIO()), live=False, clock=clock)
    clock.now += 40  # workers starting
    assert progress.line() == (
        "0/4 jobs: 0 passed, 0 failed; 40s elapsed; starting workers, then toy_norm_triton on "
        "rows=128, hidden=4096"
    )
    progress.on_progress(jobs[0], _result(jobs[0], Status.PASSED))
    assert progress.seconds_left() is None  # one result dates the start, it gives no rate
    clock.now += 10
    progress.on_progress(jobs[1], _result(jobs[1], Status.RUNTIME_ERROR))
    assert progress.seconds_left() == 20.0  # 10 s per job since the first result, 2 left
    assert progress.line() == (
        "2/4 jobs: 1 passed, 1 failed; 50s elapsed, about 20s left; at toy_norm_torch on "
        "rows=128, hidden=4096"
    )


def test_out_of_order_results_and_resumed_jobs() -> None:
    jobs = _jobs()
    progress = RunProgress(jobs, Console(file=io.StringIO()), live=False, clock=Clock())
    progress.on_progress(jobs[0], None)  # resumed: already in the dataset
    progress.on_progress(jobs[2], JobResult(skipped="needs a GPU"))  # a second device ran ahead
    running = progress.running()
    assert running is not None and running.id == 1  # the earliest that has not ended
    progress.on_progress(jobs[1], _result(jobs[1], Status.PASSED))
    running = progress.running()
    assert running is not None and running.id == 3
    assert progress.line().startswith("3/4 jobs: 1 passed, 0 failed, 1 skipped, 1 already done; ")
    progress.on_progress(jobs[3], _result(jobs[3], Status.PASSED))
    assert progress.running() is None and progress.line().endswith("; finishing")


def test_plain_lines_every_interval_when_not_a_terminal() -> None:
    output = io.StringIO()
    console = Console(file=output, width=200)
    assert not console.is_terminal
    jobs = _jobs()
    with RunProgress(jobs, console, interval_s=0.05) as progress:
        assert not progress.live
        progress.on_progress(jobs[0], _result(jobs[0], Status.PASSED))
        deadline = time.monotonic() + 10  # a loaded host may wake the printing thread late
        while len(output.getvalue().splitlines()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    lines = output.getvalue().splitlines()
    assert len(lines) >= 2
    assert all(line.startswith("1/4 jobs: 1 passed, 0 failed; ") for line in lines)


def test_the_plan_in_one_line() -> None:
    jobs = _jobs()
    assert plan_summary(jobs) == ("4 jobs of 1 definition (toy_norm: 2 solutions x 2 workloads)")
    assert plan_summary(jobs[:3]) == "3 jobs of 1 definition (toy_norm: 3 jobs)"
    assert plan_summary([]) == "0 jobs of 0 definitions"
    many = [
        Job(i, definition(f"op_{i}"), solution(f"op_{i}", "cuda", "cuda"), workload(1, 1))
        for i in range(10)
    ]
    assert plan_summary(many, listed=2) == (
        "10 jobs of 10 definitions (op_0: 1 solution x 1 workload; op_1: 1 solution x "
        "1 workload; and 8 more)"
    )


def test_durations() -> None:
    assert [duration(s) for s in (0, 59.6, 185, 3720)] == ["0s", "1m00s", "3m05s", "1h02m"]
