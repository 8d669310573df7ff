"""The judge's warm-up: its own kernels loaded and its ops' first calls made in a background thread,
so that the run's first job does not pay for them (some thirty kernels, which CUDA loads each on its
first launch, and torch's first calls: 0.3-0.7 s on an H100 host).

It must not run beside what the judge measures: the round trip to a sandbox (the judge's clock
subtracts it; a round trip measured beside a busy thread once made that clock read 0 and let the
side-stream attack pass) and the timing itself. The round trip is measured as soon as the first
sandbox starts, which is usually before the warm-up ends: the warm-up then parks at its next step
(``quiet``) instead of finishing first, and goes on beside the first job's build and checks; the
judge joins it (``join``) before it times anything.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import torch

from kernelarena.data import DType, Tolerance
from kernelarena.evaluate.compare import compare, first_changed_input
from kernelarena.evaluate.inputs import make_generator, poison

# How long ``quiet`` waits for the warm-up to reach its next step; a step is one first call.
PARK_TIMEOUT_S = 2.0


class JudgeWarmUp:
    """``work(device, step)`` in a thread, which calls ``step`` between its ops."""

    def __init__(
        self,
        device: torch.device,
        work: Callable[[torch.device, Callable[[], None]], None] | None = None,
    ) -> None:
        self._go = threading.Event()
        self._go.set()
        self._parked = threading.Event()
        self._thread = threading.Thread(
            target=work or warm_judge_kernels,
            args=(device, self._step),
            name="judge-warm-up",
            daemon=True,
        )
        self._thread.start()

    def _step(self) -> None:
        """Between two of the warm-up's ops: wait here while the judge measures."""
        if not self._go.is_set():
            self._parked.set()
            self._go.wait()
            self._parked.clear()

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Nothing of the warm-up runs inside: it is parked between two ops, or done."""
        self._go.clear()
        waited = 0.0
        while self._thread.is_alive() and not self._parked.wait(0.002):
            waited += 0.002
            if waited > PARK_TIMEOUT_S:  # a stuck first call: wait for it to end instead
                self._go.set()
                self._thread.join()
                break
        try:
            yield
        finally:
            self._go.set()

    def join(self) -> None:
        self._go.set()
        self._thread.join()


def warm_judge_kernels(device: torch.device, step: Callable[[], None] = lambda: None) -> None:
    """``judge_ops_once`` on a GPU. Best effort: whatever fails here fails again, and is
    reported, where the job does it."""
    try:
        with torch.cuda.device(device):
            judge_ops_once(device, step)
            torch.cuda.synchronize(device)
    except Exception:  # see the docstring
        pass


def judge_ops_once(device: torch.device, step: Callable[[], None] = lambda: None) -> None:
    """Draw, poison, compare and check inputs once on tiny tensors of the common float types,
    calling ``step`` between the ops."""
    generator = make_generator(device, 0)
    for dtype in (DType.BFLOAT16, DType.FLOAT16, DType.FLOAT32):
        step()
        drawn = torch.randn((4, 8), generator=generator, device=device).to(dtype.to_torch())
        out = torch.empty_like(drawn)
        poison(out, dtype)
        out.copy_(drawn)
        step()
        if not compare("warm-up", out, drawn, dtype, Tolerance(atol=0.0, rtol=0.0)).ok:
            raise AssertionError(f"a copy of {dtype.value} values does not compare equal")
        step()
        if first_changed_input({"warm-up": (drawn, out)}) is not None:
            raise AssertionError(f"a copy of {dtype.value} values does not hold the same bits")
