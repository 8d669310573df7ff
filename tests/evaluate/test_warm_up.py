"""The judge's warm-up goes on in the background and has ended once the judge joins it, which it
does before it times anything."""

import time

import torch

from kernelarena.evaluate.judge.warm_up import JudgeWarmUp


def test_join_returns_once_the_warm_up_has_done_all_its_work() -> None:
    steps: list[float] = []

    def work(device: torch.device, gpu: object) -> None:
        for _ in range(20):
            time.sleep(0.005)  # an op
            steps.append(time.perf_counter())

    warm_up = JudgeWarmUp(torch.device("cpu"), work)
    assert len(steps) < 20, "the warm-up runs in the background"
    warm_up.join()
    joined = time.perf_counter()
    assert len(steps) == 20 and steps[-1] <= joined
