"""Whether work issued now would be recorded into a CUDA graph instead of run.

Inside a capture nothing may wait for the GPU, time it, or load code onto it: Triton's autotuner
(``do_bench`` synchronizes and reads events), a first launch that JIT-compiles, a build, a
comparison with a reference (it reads results back). Apply asks before doing any of that.
"""

from __future__ import annotations

import torch


def stream_capturing() -> bool:
    """True while the current CUDA stream is being captured. Without CUDA initialized nothing can
    be capturing, and the question is answered without initializing it (a CPU-only build of
    torch would raise)."""
    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return False
    return bool(torch.cuda.is_current_stream_capturing())
