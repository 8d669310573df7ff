"""The judge's warm-up: its own kernels loaded and its ops' first calls made in a background thread,
so that the run's first job does not pay for them (some thirty kernels, which CUDA loads each on its
first launch, and torch's first calls: 0.3-0.7 s on an H100 host). It goes on beside the first
job's sandbox start, build and checks; it must not run beside the timing itself, so the judge joins
it (``join``) before it times anything.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from kernelarena.data import DType, Tolerance
from kernelarena.evaluate.judge.device_lock import NO_LOCK, Lock
from kernelarena.evaluate.sandbox.error_ratio import normwise
from kernelarena.runtime.compare import all_within, compare, first_changed_input
from kernelarena.runtime.inputs import make_generator, poison


class JudgeWarmUp:
    """``work(device, gpu)`` in a thread, until ``join``; ``gpu``: the thread's own hold on the
    GPU's lock (``device_lock``)."""

    def __init__(
        self,
        device: torch.device,
        work: Callable[[torch.device, Lock], None] | None = None,
        gpu: Lock = NO_LOCK,
    ) -> None:
        self._thread = threading.Thread(
            target=work or warm_judge_kernels,
            args=(device, gpu),
            name="judge-warm-up",
            daemon=True,
        )
        self._thread.start()

    def join(self) -> None:
        self._thread.join()


def warm_judge_kernels(device: torch.device, gpu: Lock = NO_LOCK) -> None:
    """``judge_ops_once`` on a GPU. Best effort: whatever fails here fails again, and is reported,
    where the job does it."""
    try:
        with gpu.shared(), torch.cuda.device(device):
            judge_ops_once(device)
            torch.cuda.synchronize(device)
    except Exception:  # see the docstring
        pass


def judge_ops_once(device: torch.device) -> None:
    """Draw, poison, compare and check inputs once on tiny tensors of the common float types, as
    a job's checks do: the full comparison, the float32 one of a checked pass (``all_within``,
    the verdicts stacked), the look for unwritten outputs, and the error ratio against a float64
    truth. On an H200 the first job's judge spent ~0.3 s more than the next ones in these."""
    generator = make_generator(device, 0)
    exact = Tolerance(atol=0.0, rtol=0.0)
    verdicts, unwritten = [], []
    for dtype in (DType.BFLOAT16, DType.FLOAT16, DType.FLOAT32):
        drawn = torch.randn((4, 8), generator=generator, device=device).to(dtype.to_torch())
        out = torch.empty_like(drawn)
        poison(out, dtype)
        unwritten.append(torch.isnan(out).any())
        out.copy_(drawn)
        if not compare("warm-up", out, drawn, dtype, exact).ok:
            raise AssertionError(f"a copy of {dtype.value} values does not compare equal")
        if first_changed_input({"warm-up": (drawn, out)}) is not None:
            raise AssertionError(f"a copy of {dtype.value} values does not hold the same bits")
        within = all_within(out, drawn, Tolerance(atol=1e-6, rtol=0.0))
        verdicts.append(torch.stack([within, within]).all() if within is not None else None)
        truth = drawn.to(torch.float64)
        if normwise(out, truth, torch.isfinite(truth)) != 0.0:
            raise AssertionError(f"a copy of {dtype.value} values has an error")
    if not all(v is not None and bool(v) for v in verdicts):
        raise AssertionError("a copy is not within a tolerance of its original")
    if torch.stack(unwritten).tolist() != [True] * len(unwritten):
        raise AssertionError("a poisoned output holds no NaN")
