"""kernelarena: define GPU operators once, prove every implementation correct, time them, ship the fastest.

The public names, each imported on first use so that ``import kernelarena`` and the command line
stay fast (torch is loaded only by what needs it):

Definition, Workload, Solution, Trace, TraceSet
    The FlashInfer-Trace schemas and a dataset folder (``kernelarena.data`` has the rest: axes,
    tensor specs, inputs).
register(definition, fn, name, language="python")
    Make a function of your module a solution of a definition; it runs only in worker processes.
Benchmark(trace_set).run_all()
    Check and time every (solution, workload) of a dataset in worker processes; returns the traces.
load_library()
    The built-in operators (definitions, workloads, solutions and their shipped traces).
apply(name), enable_apply(), disable_apply()
    Call the measured winner for the shape at hand on the GPU at hand; the body is the fallback.
ops
    Every built-in operator as a function that dispatches through apply (``kernelarena.ops.rmsnorm``).

The command line is ``kernelarena`` (or ``python -m kernelarena``); ``kernelarena -h`` lists its
commands.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "TraceSet": "kernelarena.data",
    "Definition": "kernelarena.data",
    "Solution": "kernelarena.data",
    "Workload": "kernelarena.data",
    "Trace": "kernelarena.data",
    "Benchmark": "kernelarena.evaluate.executors.benchmark",
    "register": "kernelarena.registry",
    "load_library": "kernelarena.library",
    "apply": "kernelarena.dispatch.apply",
    "enable_apply": "kernelarena.dispatch.apply",
    "disable_apply": "kernelarena.dispatch.apply",
}


def __getattr__(name: str) -> Any:
    if name == "ops":  # kernelarena.ops.rmsnorm(...) without importing kernelarena.ops first
        return import_module("kernelarena.ops")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kernelarena' has no attribute '{name}'")
    return getattr(import_module(module), name)


def __dir__() -> list[str]:
    """The lazy names too, so tab completion and ``dir(kernelarena)`` find them."""
    return sorted(set(globals()) | set(__all__) | {"ops"})


__all__ = sorted(_EXPORTS)  # not "ops": a star import should not build every operator
