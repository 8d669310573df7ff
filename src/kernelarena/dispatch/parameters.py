"""The decorated function's own signature: keyword calls and defaults turned into positions.

Apply matches arguments to a definition by position; these helpers let a call use the function's
keywords, its defaults and keyword-only outputs (``def f(x, w, eps, *, out=None)``) all the same.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def signature_of(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def call_by_position(
    fn: Callable[..., Any], signature: inspect.Signature | None
) -> Callable[..., Any]:
    """``fn`` callable with every argument by position (keyword-only ones passed by name)."""
    if signature is None:
        return fn
    keyword_only = [
        p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    if not keyword_only:
        return fn
    split = len(parameter_names(signature)) - len(keyword_only)

    def call(*args: Any) -> Any:
        return fn(*args[:split], **dict(zip(keyword_only, args[split:], strict=False)))

    return call


def parameter_names(signature: inspect.Signature | None) -> list[str]:
    """Parameters in call order: positional ones, then keyword-only ones (outputs often are)."""
    if signature is None:
        return []
    kinds = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )
    return [p.name for p in signature.parameters.values() if p.kind in kinds]


def positional_arguments(
    signature: inspect.Signature | None,
    parameters: list[str],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    label: str,
) -> tuple[Any, ...]:
    """Keywords and defaults bound by the body's own signature, as a tuple in its order.
    Trailing parameters left at a default of None are dropped: ``f(x, w, eps, out=None)``
    called without ``out`` is a value-returning call."""
    if not kwargs and (signature is None or len(args) >= len(parameters)):
        return args
    if signature is None:
        raise TypeError(f"{label}: keyword arguments need a function with a signature")
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as error:
        raise TypeError(f"{label}: {error}") from None
    given = set(bound.arguments)
    bound.apply_defaults()
    names = [n for n in parameters if n in bound.arguments]
    while names and names[-1] not in given and bound.arguments[names[-1]] is None:
        names.pop()
    return tuple(bound.arguments[n] for n in names)


Binder = Callable[[tuple[Any, ...], dict[str, Any]], tuple[Any, ...]]


def binder(
    signature: inspect.Signature | None,
    parameters: list[str],
    count: int,
    names: tuple[str, ...],
    label: str,
) -> Binder:
    """``positional_arguments`` for calls of ``count`` positional arguments and the keywords
    ``names``, compiled once: ``(args, kwargs) -> positions``, a tuple built by straight-line
    code. ``Signature.bind`` costs microseconds a call; this, a tuple. Raises what
    ``positional_arguments`` raises for a call of that form."""
    given = tuple(_Marker(i) for i in range(count))
    named = {name: _Marker(name) for name in names}
    bound = positional_arguments(signature, parameters, given, named, label)
    parts, constants = [], []
    for value in bound:
        if isinstance(value, _Marker) and isinstance(value.source, int):
            parts.append(f"a[{value.source}]")
        elif isinstance(value, _Marker):
            parts.append(f"k[{value.source!r}]")
        else:  # a default: the same object every call, as a function's own defaults are
            constants.append(value)
            parts.append(f"c[{len(constants) - 1}]")
    namespace: dict[str, Any] = {"c": constants}
    code = f"def bind(a, k):\n    return ({', '.join(parts)}{',' if parts else ''})\n"
    exec(compile(code, f"<kernelarena apply binder {label}>", "exec"), namespace)
    bind: Binder = namespace["bind"]
    return bind


class _Marker:
    """Stands for an argument while a call form is bound once: its position or keyword."""

    __slots__ = ("source",)

    def __init__(self, source: int | str) -> None:
        self.source = source
