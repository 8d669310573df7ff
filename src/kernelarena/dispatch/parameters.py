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
