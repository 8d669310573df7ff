"""torch.compile with a graph cache of its own per argument signature: the library's torch.compile
peers, compiled the way a program compiled for fixed shapes runs them.

Dynamo keeps a function's compiled graphs on its code object and compiles at most
``torch._dynamo.config.recompile_limit`` (8) of them per code object; past that it runs the
function eagerly for good, with one warning in the log. A peer compiled with ``dynamic=False``
needs a graph per shape, dtype and stride, and one more per grad mode (the evaluator checks a
solution with grad enabled and times it under ``no_grad``). The three dtypes of a definition share
one module (same sources, one build), so a benchmark of all three reaches the limit: the shapes
past it run eagerly and their figures are eager ones, not the compiled graph's (rmsnorm's peer:
docs/kernels/rmsnorm.md).

Here each signature gets its own copy of the function's code object, and with it its own graph
cache, which holds one graph per grad mode: the limit is never reached, and after the first call
of a signature (the evaluator's check and warm-up) no call compiles. ``dynamo_compile_attempts``
counts dynamo's compiles in this process, for a caller that wants to know whether one happened
while it was timing.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Callable, Hashable
from typing import Any

import torch


def _signature(args: tuple[Any, ...]) -> tuple[Hashable, ...]:
    """What dynamo specializes a static graph on: every tensor's shape, strides, dtype, device and
    whether it needs grad; every other argument's type and value (floats such as eps are
    specialized too)."""
    return tuple(
        (tuple(a.shape), a.stride(), a.dtype, a.device, a.requires_grad)
        if isinstance(a, torch.Tensor)
        else (type(a), a)
        for a in args
    )


def _fresh_copy(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` with a code object of its own: a new, empty dynamo cache."""
    code = fn.__code__.replace()  # a new code object even though nothing changes
    copy = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    return copy


class PerShapeCompiled:
    """``torch.compile(fn, dynamic=False, **options)`` once per argument signature."""

    def __init__(self, fn: types.FunctionType, **options: Any) -> None:
        self.fn = fn
        self.options = options
        self.compiled: dict[tuple[Hashable, ...], Callable[..., Any]] = {}
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        signature = _signature(args)
        compiled = self.compiled.get(signature)
        if compiled is None:
            with self._lock:
                compiled = self.compiled.get(signature)
                if compiled is None:
                    compiled = torch.compile(_fresh_copy(self.fn), dynamic=False, **self.options)
                    self.compiled[signature] = compiled
        return compiled(*args)


def compile_per_shape(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Decorator (bare or with ``torch.compile`` options such as ``backend``): compile ``fn`` with
    static shapes, one graph cache per argument signature. Positional arguments only."""

    def wrap(target: Callable[..., Any]) -> PerShapeCompiled:
        if not isinstance(target, types.FunctionType):
            raise TypeError(f"compile_per_shape needs a Python function, not {type(target)}")
        return PerShapeCompiled(target, **options)

    return wrap if fn is None else wrap(fn)


def dynamo_compile_attempts() -> int:
    """How many frames dynamo has set out to compile in this process (0 before it is imported):
    a difference across a timed span means the span included a compile."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["frames"]["total"])
