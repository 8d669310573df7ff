"""The judge's warm-up parks while the judge measures a round trip, and ends before it times."""

import threading
import time

import torch

from kernelarena.evaluate.warm_up import JudgeWarmUp


def _stepping(steps: list[float], count: int, pause_s: float = 0.005):
    def work(device: torch.device, step) -> None:
        for _ in range(count):
            step()
            steps.append(time.perf_counter())
            time.sleep(pause_s)  # an op

    return work


def test_quiet_parks_the_warm_up_between_its_ops() -> None:
    steps: list[float] = []
    warm_up = JudgeWarmUp(torch.device("cpu"), _stepping(steps, 400))
    time.sleep(0.02)
    with warm_up.quiet():
        entered = time.perf_counter()
        time.sleep(0.05)
        left = time.perf_counter()
    warm_up.join()
    assert len(steps) == 400, "the warm-up goes on after the quiet span and finishes"
    assert not [t for t in steps if entered <= t <= left], "no op ran inside the quiet span"


def test_quiet_and_join_after_the_warm_up_ended() -> None:
    steps: list[float] = []
    warm_up = JudgeWarmUp(torch.device("cpu"), _stepping(steps, 2, 0.0))
    time.sleep(0.05)
    started = time.perf_counter()
    with warm_up.quiet():
        pass
    warm_up.join()
    assert time.perf_counter() - started < 0.5
    assert len(steps) == 2


def test_a_stuck_op_is_waited_for_not_run_beside() -> None:
    release = threading.Event()
    finished: list[float] = []

    def work(device: torch.device, step) -> None:
        step()
        release.wait(5.0)  # one op that does not reach the next step for a while
        finished.append(time.perf_counter())

    warm_up = JudgeWarmUp(torch.device("cpu"), work)
    time.sleep(0.01)
    threading.Timer(0.1, release.set).start()
    with warm_up.quiet():
        inside = time.perf_counter()
    assert finished and finished[0] <= inside, "quiet waited for the op to end"
    warm_up.join()
