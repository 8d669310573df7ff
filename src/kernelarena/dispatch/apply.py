"""``@apply(name)``: calls go to the measured winner for the shape at hand; the body is the fallback.

The hot path: one C++ check of the arguments' tensors against the guard that passed last
(``signature.Guards``), then one call of what was prepared for that key; where the guard fails,
the key's own guard or the generated key over the arguments (``signature.key_functions``). It
is compiled where a C compiler is at hand (``fastcall.py``: a ``FastCall`` in front of
``wrapper`` in ``routed``, which takes every call the guard does not pass), else ``wrapper``
alone. Everything else (choosing the definition, checking the arguments,
the table, building and trying the solutions, allocating closures, recording the workload)
happens once per key under a lock (``first_use.py``).

Turned on and off in ``state.py`` (``enable_apply``, ``KERNELARENA_APPLY=1``). While apply is off,
a decorated function costs one flag test beyond the call of its body (in C, or in Python); with
``KERNELARENA_APPLY=0`` set when the function is decorated, the decorator returns the function
itself and costs nothing at all (apply can then never reach it).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kernelarena.dispatch import fastcall
from kernelarena.dispatch.parameters import (
    Binder,
    binder,
    call_by_position,
    call_form,
    form_slots,
    parameter_names,
    signature_of,
)
from kernelarena.dispatch.sites import register
from kernelarena.dispatch.state import current_runtime, disable_apply, enable_apply

if TYPE_CHECKING:
    from kernelarena.data import Definition
    from kernelarena.dispatch.calls import Prepared
    from kernelarena.dispatch.runtime import ApplyRuntime
    from kernelarena.dispatch.signature import Guards

log = logging.getLogger("kernelarena.dispatch")
F = TypeVar("F", bound=Callable[..., Any])
# (runtime, definition, device) -> what runs when no measured solution can: a Runnable or a
# value-returning callable. Default: the decorated body.
FallbackFor = Callable[["ApplyRuntime", "Definition", Any], Any]

__all__ = ["CallSite", "apply", "current_runtime", "disable_apply", "enable_apply", "routed"]


def _unbound(args: tuple[Any, ...]) -> Any:
    raise LookupError("not bound to a runtime yet")


def _store_nowhere(key: tuple[Any, ...], args: tuple[Any, ...], prepared: Prepared) -> None:
    raise LookupError("not bound to a runtime yet")


class _Unguarded:
    """The guards of a site not bound to a runtime: none ever passes (an argument count of -1)."""

    hit: tuple[int, Any, Any, Any, int] = (-1, None, None, None, -1)


class CallSite:
    """One decorated function: its fallback, and per runtime its key function and entries."""

    def __init__(
        self,
        name: str | Sequence[str],
        fallback: Callable[..., Any],
        fallback_for: FallbackFor | None = None,
        runtime_for: Callable[[], ApplyRuntime | None] | None = None,
        label: str | None = None,
    ) -> None:
        self.name = name
        self.fallback = fallback
        self.fallback_for = fallback_for
        self.runtime_for = runtime_for or current_runtime
        qualname = getattr(fallback, "__qualname__", "function")
        self.label = label or f"{qualname} (apply {name!r})"
        self.signature = signature_of(fallback)
        self.parameters = parameter_names(self.signature)
        # Calls with fewer positional arguments than this fill defaults (0: none has one).
        self.arity = len(self.parameters) if _has_defaults(self.signature) else 0
        self.binders: dict[tuple[int, tuple[str, ...]], Binder] = {}
        self.empty_like: Any = None  # torch's, set when first bound
        self.contiguous: Any = None
        self.body = call_by_position(fallback, self.signature)
        self.lock = threading.Lock()
        # The compiled hot path (fastcall.FastCall), kept in step with ``passthrough`` and
        # ``guards``; None where the Python wrapper stands alone.
        self.fast: Any = None
        self.reset()

    def attach(self, fast: Any) -> None:
        """``fast`` takes the hot path's calls from now on, from the site's state as it is."""
        self.fast = fast
        fast.passthrough = self.passthrough
        fast.slot = getattr(self.guards, "slot", None)
        if self.empty_like is not None:
            fast.empty_like, fast.memory_format = self.empty_like, self.contiguous

    def reset(self) -> None:
        """Forget the runtime: the next call binds again (apply enabled, disabled, or replaced)."""
        self._set_passthrough(False)
        self.runtime: ApplyRuntime | None = None
        self.candidates: list[Definition] = []
        self.key_of: Callable[[tuple[Any, ...]], tuple[Any, ...]] = _unbound
        self.lookup: Callable[[tuple[Any, ...]], Prepared] = _unbound
        self.store: Callable[[tuple[Any, ...], tuple[Any, ...], Prepared], None] = _store_nowhere
        self._set_guards(_Unguarded())
        self.entries: dict[tuple[Any, ...], Prepared] = {}

    def _set_passthrough(self, value: bool) -> None:
        self.passthrough = value
        if self.fast is not None:
            self.fast.passthrough = value

    def _set_guards(self, guards: Guards | _Unguarded) -> None:
        self.guards = guards
        if self.fast is not None:
            self.fast.slot = getattr(guards, "slot", None)

    # -- slow path --------------------------------------------------------------------------

    def dispatch(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        from kernelarena.dispatch.calls import invoke

        runtime = self.runtime_for()
        if runtime is None:
            self._pass_through(lambda: self.runtime_for() is None)
            return self.fallback(*args, **kwargs)
        if self.runtime is not runtime:
            self._bind(runtime)
        # One consistent view: enable_apply/disable_apply in another thread may reset the site.
        candidates, key_of, entries = self.candidates, self.key_of, self.entries
        store = self.store
        if not candidates:  # nothing to dispatch to in this runtime: the body, at no cost
            self._pass_through(lambda: self.runtime is runtime)
            return self.fallback(*args, **kwargs)
        short = len(args) < len(self.parameters)
        positional = self.positional(args, kwargs) if kwargs or short else args
        try:
            prepared = entries[key_of(positional)]
        except Exception:
            prepared = self._resolve(runtime, candidates, key_of, entries, store, positional)
        return invoke(prepared, positional)

    def missed(self, args: tuple[Any, ...], kwargs: dict[str, Any], given: tuple[Any, ...]) -> Any:
        """A call the last guard did not pass (``given``: its arguments made positional): the
        key's guard (``lookup``), else the slow path."""
        from kernelarena.dispatch.calls import invoke

        try:
            prepared = self.lookup(given)
        except Exception:  # a new key, or arguments that need checking
            return self.dispatch(args, kwargs)
        return invoke(prepared, given)

    def _pass_through(self, still: Callable[[], bool]) -> None:
        """Call the body directly from now on, unless apply changed meanwhile (then a reset has
        happened or is about to, and this must not undo it)."""
        self._set_passthrough(True)
        if not still():
            self._set_passthrough(False)

    def _bind(self, runtime: ApplyRuntime) -> None:
        from kernelarena.dispatch.signature import key_functions
        from kernelarena.runtime.names import UnknownNames, definitions_named

        with self.lock:
            if self.runtime is runtime:
                return
            import torch  # loaded by now: the hot path allocates with it, once bound

            self.empty_like, self.contiguous = torch.empty_like, torch.contiguous_format
            if self.fast is not None:
                self.fast.empty_like, self.fast.memory_format = self.empty_like, self.contiguous
            try:
                candidates = definitions_named(runtime.trace_set, self.name)
            except UnknownNames as error:  # documented: the body runs (docs/apply.md)
                log.warning("%s: %s; the body runs instead", self.label, error.brief)
                candidates = []
            entries: dict[tuple[Any, ...], Prepared] = {}
            self.candidates, self.entries = candidates, entries
            self.key_of, self.lookup, self.store = _unbound, _unbound, _store_nowhere
            self._set_guards(_Unguarded())
            if candidates:
                self.key_of, self.lookup, self.store, guards = key_functions(
                    candidates, runtime.tracing, entries, fastcall.new_slot(self.fast)
                )
                self._set_guards(guards)
            self.runtime = runtime

    def positional(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """Keywords and defaults as positions, by a binder compiled once per form of call."""
        key = (len(args), tuple(kwargs))
        bind = self.binders.get(key)
        if bind is None:
            form = call_form(self.signature, self.parameters, *key, self.label)
            if self.fast is not None:  # such calls are made positional in C from now on
                self.fast.add_form(*key, *form_slots(form))
            bind = self.binders[key] = binder(form, *key, self.label)
        return bind(args, kwargs)

    def _resolve(
        self,
        runtime: ApplyRuntime,
        candidates: list[Definition],
        key_of: Callable[[tuple[Any, ...]], tuple[Any, ...]],
        entries: dict[tuple[Any, ...], Prepared],
        store: Callable[[tuple[Any, ...], tuple[Any, ...], Prepared], None],
        args: tuple[Any, ...],
    ) -> Prepared:
        """The first call of a key: its solutions chosen and tried (``first_use.prepare``), the
        workload recorded when tracing. Inside a CUDA graph capture nothing of that may run: the
        capture gets what can run there (``first_use.capture_choice``) and the key stays
        unresolved for the next eager call."""
        from kernelarena.dispatch import first_use
        from kernelarena.dispatch.signature import bind_call
        from kernelarena.runtime.capture import stream_capturing

        binding = bind_call(candidates, args, self.parameters, self.label)
        key = key_of(args)
        with runtime.lock:
            if key in entries:
                return entries[key]
            if stream_capturing():
                return first_use.capture_choice(self, runtime, binding)
            prepared = first_use.prepare(self, runtime, binding, args)
            if runtime.recorder is not None:
                try:
                    runtime.recorder.record(binding.definition, binding.axes, args)
                except Exception as error:  # tracing never stops the program it watches
                    log.warning("%s: workload not recorded: %s", self.label, error)
            store(key, args, prepared)  # into dicts a reset meanwhile has simply dropped
        return prepared


def apply(
    name: str | Sequence[str], *, fallback_for: FallbackFor | None = None
) -> Callable[[F], F]:
    """Decorate a function: calls go to the fastest measured solution of ``name`` (a definition, a
    family such as ``"rmsnorm"``, or an op_type) for the arguments' dtypes and shapes on this
    device; the function's body is the fallback. Positional calls take the fast path."""

    def decorate(fallback: F) -> F:
        if os.environ.get("KERNELARENA_APPLY") == "0":
            return fallback
        return routed(CallSite(name, fallback, fallback_for))  # type: ignore[return-value]

    return decorate


def routed(site: CallSite) -> Callable[..., Any]:
    """The function that stands for ``site``: the compiled hot path in front of ``wrapper``
    (``fastcall.py``), or ``wrapper`` alone, the hot path written out in Python. Keyword calls,
    and where the function has defaults calls that leave some out, are made positional first
    (``CallSite.positional``: a tuple built by code compiled for that form of call; the compiled
    hot path keeps each form's positions too)."""
    register(site)
    fallback = site.fallback
    arity = site.arity  # 0 unless the function has defaults: no call is then short of them

    @functools.wraps(fallback)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if site.passthrough:
            return fallback(*args, **kwargs)
        given = site.positional(args, kwargs) if kwargs or len(args) < arity else args
        count, pick, check, call, into = site.guards.hit
        if len(given) == count and check(*pick(given)):  # calls.invoke(), written out
            if into == -1:
                return call(*given)
            if into >= 0:
                call(*given)
                return given[into]
            out = site.empty_like(given[-2 - into], memory_format=site.contiguous)
            call(*given, out)
            return out
        return site.missed(args, kwargs, given)

    wrapper.__kernelarena_site__ = site  # type: ignore[attr-defined]
    fast = fastcall.fast_callable(wrapper, fallback, arity)
    if fast is None:
        return wrapper
    functools.update_wrapper(fast, fallback)  # __name__, __doc__, __wrapped__ (the signature)...
    fast.__kernelarena_site__ = site
    site.attach(fast)
    return fast  # type: ignore[no-any-return]


def _has_defaults(signature: Any) -> bool:
    return signature is not None and any(
        p.default is not p.empty for p in signature.parameters.values()
    )
