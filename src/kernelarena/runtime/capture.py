"""Whether work issued now would be recorded into a CUDA graph instead of run.

Inside a capture nothing may wait for the GPU, time it, or load code onto it: Triton's autotuner
(``do_bench`` synchronizes and reads events), a first launch that JIT-compiles, a build, a
comparison with a reference (it reads results back). Apply asks before doing any of that.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def stream_capturing() -> bool:
    """True while the current CUDA stream is being captured. Without CUDA initialized nothing can
    be capturing, and the question is answered without initializing it (a CPU-only build of
    torch would raise)."""
    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return False
    return bool(torch.cuda.is_current_stream_capturing())


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off for a capture. A CUDA graph dropped earlier in
    a reference cycle (a test's traceback, a torch.compile cache) is destroyed when the collector
    next runs; if that is inside a capture, its reset is an operation a capture does not permit,
    and the capture under way fails ("operation failed due to a previous error during capture").
    ``torch.cuda.graph`` no longer collects before it captures (it became opt-in,
    ``torch.compiler.config.force_cudagraph_gc``), and any Python inside the capture can set the
    collector off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
