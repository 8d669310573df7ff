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


def call_form(
    signature: inspect.Signature | None,
    parameters: list[str],
    count: int,
    names: tuple[str, ...],
    label: str,
) -> tuple[Any, ...]:
    """How every call of ``count`` positional arguments and the keywords ``names`` (in call
    order) binds: per position, an ``Argument`` (where the call passes it: its positionals, then
    its keywords' values, as a vectorcall lays them out) or a default value. Raises what
    ``positional_arguments`` raises for a call of that form."""
    given = tuple(Argument(i) for i in range(count))
    named = {name: Argument(count + k) for k, name in enumerate(names)}
    return positional_arguments(signature, parameters, given, named, label)


def binder(form: tuple[Any, ...], count: int, names: tuple[str, ...], label: str) -> Binder:
    """``positional_arguments`` for calls of ``form`` (``call_form``), compiled once:
    ``(args, kwargs) -> positions``, a tuple built by straight-line code. ``Signature.bind``
    costs microseconds a call; this, a tuple."""
    parts, constants = [], []
    for value in form:
        if isinstance(value, Argument) and value.slot < count:
            parts.append(f"a[{value.slot}]")
        elif isinstance(value, Argument):
            parts.append(f"k[{names[value.slot - count]!r}]")
        else:  # a default: the same object every call, as a function's own defaults are
            constants.append(value)
            parts.append(f"c[{len(constants) - 1}]")
    namespace: dict[str, Any] = {"c": constants}
    code = f"def bind(a, k):\n    return ({', '.join(parts)}{',' if parts else ''})\n"
    exec(compile(code, f"<kernelarena apply binder {label}>", "exec"), namespace)
    bind: Binder = namespace["bind"]
    return bind


def form_slots(form: tuple[Any, ...]) -> tuple[tuple[int, ...], tuple[Any, ...]]:
    """``form`` as the compiled hot path takes it (``FastCall.add_form``): per position the slot
    of the call's arguments, or ``-1 - k`` for the k-th default; and the defaults."""
    sources, defaults = [], []
    for value in form:
        if isinstance(value, Argument):
            sources.append(value.slot)
        else:
            defaults.append(value)
            sources.append(-len(defaults))
    return tuple(sources), tuple(defaults)


class Argument:
    """Stands for an argument while a form of call is bound once: where the call passes it."""

    __slots__ = ("slot",)

    def __init__(self, slot: int) -> None:
        self.slot = slot
