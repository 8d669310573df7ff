"""Whether apply is on, and with which runtime; every call site is told when that changes.

``enable_apply()`` or the environment: ``KERNELARENA_APPLY=1`` (with ``KERNELARENA_DATASET`` for the
folder, ``KERNELARENA_RANK_BY`` for the ranking figure, ``KERNELARENA_VERIFY`` and
``KERNELARENA_VERIFY_EVERY`` for the checks of solutions kernelarena does not ship) or
``KERNELARENA_TRACE=1`` / ``=tensors`` (apply with workload tracing), read once, on the first call
of a decorated function.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from kernelarena.dispatch.sites import lock as _lock
from kernelarena.dispatch.sites import register as register  # re-exported
from kernelarena.dispatch.sites import reset_all as _reset_sites

if TYPE_CHECKING:
    from kernelarena.data import TraceSet
    from kernelarena.dispatch.runtime import ApplyRuntime


_runtime: ApplyRuntime | None = None
_environment_read = False


def current_runtime() -> ApplyRuntime | None:
    global _environment_read
    if _runtime is None and not _environment_read:
        with _lock:
            if not _environment_read:
                _environment_read = True
                trace = os.environ.get("KERNELARENA_TRACE", "")
                if os.environ.get("KERNELARENA_APPLY") == "1" or trace not in ("", "0"):
                    enable_apply(trace=trace not in ("", "0"), trace_tensors=trace == "tensors")
    return _runtime


def enable_apply(
    dataset: str | Path | TraceSet | None = None,
    *,
    trace: bool = False,
    trace_tensors: bool = False,
    use_cache: bool = True,
    rank_by: str | None = None,
    verify: bool | None = None,
    verify_every: int | None = None,
) -> ApplyRuntime:
    """Turn apply on for every decorated function. ``dataset``: a folder (with the built-in library
    and its shipped traces; default ``$KERNELARENA_DATASET``) or a TraceSet used as it is. With
    ``trace``, the first call of each shape records a workload in the dataset (``trace_tensors``:
    its input tensors too). ``rank_by`` (default ``$KERNELARENA_RANK_BY``, else ``auto``): which
    measured figure picks the winner: ``auto``, the per-call wall time of an eager loop, except
    inside CUDA graph capture, where the GPU time; ``eager`` or ``gpu`` always that one.
    ``verify`` (default ``$KERNELARENA_VERIFY``, else on): the first call of a solution
    kernelarena does not ship, at each shape, is compared with the definition's reference on the
    same inputs, and a solution that disagrees is dropped for the process (the call returns the
    next choice's result). ``verify_every`` (default ``$KERNELARENA_VERIFY_EVERY``, else 0):
    compare such a solution's calls again every that many calls outside CUDA graph capture."""
    from kernelarena.data import TraceSet
    from kernelarena.dispatch.runtime import ApplyRuntime
    from kernelarena.dispatch.tracing import WorkloadRecorder

    global _runtime, _environment_read
    if isinstance(dataset, TraceSet):
        combined, writable = dataset, dataset
    else:
        from kernelarena.datasets import load_default

        combined, writable = load_default(dataset)
    recorder = None
    if trace or trace_tensors:
        recorder = WorkloadRecorder(writable, save_tensors=trace_tensors)
    runtime = ApplyRuntime(
        combined,
        recorder,
        use_cache=use_cache,
        rank_by=rank_by,
        verify=verify,
        verify_every=verify_every,
    )
    with _lock:
        _runtime, _environment_read = runtime, True
        _reset_sites()
    return runtime


def disable_apply() -> None:
    """Turn apply off: decorated functions call their bodies again."""
    global _runtime, _environment_read
    with _lock:
        _runtime, _environment_read = None, True
        _reset_sites()
