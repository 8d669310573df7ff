"""kernelarena: define GPU operators once, prove every implementation correct, time them, ship the fastest.

The package imports lazily so that ``import kernelarena`` and the command line stay fast; torch is
loaded only by what needs it.
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
    "Benchmark": "kernelarena.evaluate.benchmark",
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


__all__ = sorted(_EXPORTS)
