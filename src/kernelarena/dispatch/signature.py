"""How a call's arguments meet a definition: which definition and calling style, the axis values,
errors that name the argument, and the key function of the hot path.

A call is value-returning when it passes the definition's inputs, destination-passing when the
inputs are followed by the outputs that alias no input. Arguments are matched by position; the
decorated function's own parameter names are used in messages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Literal

import torch

from kernelarena.data import Definition, TensorSpec
from kernelarena.data.definition import AxisError
from kernelarena.data.expressions import ExpressionError
from kernelarena.dispatch.axes import bind_axes

Style = Literal["value", "dps"]
STYLES: tuple[Style, ...] = ("value", "dps")


class ApplyArgumentError(ValueError):
    """Arguments that match no declared shape, dtype or count; the message names the argument."""

    def __init__(
        self, message: str, position: int = -1, kind: str = "", argument: str = ""
    ) -> None:
        super().__init__(message)
        self.position = position
        self.kind = kind
        self.argument = argument


@dataclass(frozen=True)
class Binding:
    definition: Definition
    style: Style
    axes: dict[str, int]
    device: torch.device
    flags: dict[str, bool] = field(default_factory=dict)  # boolean scalar inputs, part of the key


def passed_outputs(definition: Definition) -> list[str]:
    """Outputs passed in destination-passing style: those that alias no input."""
    return [n for n, spec in definition.outputs.items() if spec.aliases is None]


def styles(definition: Definition) -> tuple[Style, ...]:
    """Both styles, or only "value" when every output aliases an input (the calls are the same)."""
    return STYLES if passed_outputs(definition) else ("value",)


def argument_specs(definition: Definition, style: Style) -> list[tuple[str, TensorSpec]]:
    specs = list(definition.inputs.items())
    if style == "dps":
        specs += [(n, definition.outputs[n]) for n in passed_outputs(definition)]
    return specs


def _scalar_ok(value: Any, spec: TensorSpec) -> bool:
    if spec.dtype.python_type is bool:
        return isinstance(value, bool)
    if spec.dtype.python_type is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, int | float) and not isinstance(value, bool)


def bind_one(
    definition: Definition, style: Style, args: Sequence[Any], parameters: Sequence[str], label: str
) -> Binding:
    """Check every argument against ``definition`` in ``style``; raise naming the first that fails."""
    specs = argument_specs(definition, style)

    def fail(position: int, kind: str, problem: str) -> ApplyArgumentError:
        name = specs[position][0]
        shown = parameters[position] if position < len(parameters) else name
        role = "output" if position >= len(definition.inputs) else "input"
        alias = "" if shown == name else f" ({role} '{name}' of {definition.name})"
        return ApplyArgumentError(
            f"{label}: argument '{shown}'{alias}: {problem}", position, kind, shown
        )

    shapes: dict[str, tuple[int, ...] | None] = {}
    flags: dict[str, bool] = {}
    device: torch.device | None = None
    for position, ((name, spec), value) in enumerate(zip(specs, args, strict=True)):
        if spec.shape is None:
            if not _scalar_ok(value, spec):
                expected = spec.dtype.python_type.__name__
                raise fail(position, "type", f"expected a {expected} scalar, got {value!r}")
            if spec.dtype.python_type is bool:
                flags[name] = value
            continue
        if not isinstance(value, torch.Tensor):
            raise fail(
                position,
                "type",
                f"expected a {spec.dtype.value} tensor of shape {spec.shape}, "
                f"got {type(value).__name__}",
            )
        if value.dtype != spec.dtype.to_torch():
            raise fail(position, "dtype", f"dtype {value.dtype}, expected {spec.dtype.value}")
        if device is None:
            device = value.device
        elif value.device != device:
            raise fail(position, "device", f"on {value.device}, other tensors are on {device}")
        if position < len(definition.inputs):
            shapes[name] = tuple(value.shape)
    try:
        axes = bind_axes(definition, shapes)
    except (AxisError, ExpressionError) as error:
        names = list(definition.inputs)
        position = next((i for i, n in enumerate(names) if f"'{n}'" in str(error)), 0)
        shown = parameters[position] if position < len(parameters) else names[position]
        note = "" if shown == names[position] else f" (your '{shown}' is its '{names[position]}')"
        raise ApplyArgumentError(f"{label}: {error}{note}", position, "shape", shown) from None
    for position in range(len(definition.inputs), len(specs)):
        spec, value = specs[position][1], args[position]
        wanted = definition.shape_of(spec, axes) or ()
        if tuple(value.shape) != wanted:
            raise fail(position, "shape", f"shape {tuple(value.shape)}, expected {wanted}")
    if device is None:
        device = torch.device("cpu")
    return Binding(definition, style, axes, device, flags)


def bind_call(
    candidates: Sequence[Definition], args: Sequence[Any], parameters: Sequence[str], label: str
) -> Binding:
    """The one (definition, style) that ``args`` fit; errors name the argument and what was expected."""
    shaped = [
        (d, s) for d in candidates for s in styles(d) if len(argument_specs(d, s)) == len(args)
    ]
    if not shaped:
        expected = sorted(
            {
                f"{len(argument_specs(d, s))} ({', '.join(n for n, _ in argument_specs(d, s))})"
                for d in candidates
                for s in styles(d)
            }
        )
        raise ApplyArgumentError(
            f"{label}: {len(args)} arguments; expected {' or '.join(expected)}"
        )
    bound, failures = [], []
    for definition, style in shaped:
        try:
            bound.append(bind_one(definition, style, args, parameters, label))
        except ApplyArgumentError as error:
            failures.append((definition, error))
    if len(bound) == 1:
        return bound[0]
    if bound:
        names = ", ".join(f"{b.definition.name} ({b.style})" for b in bound)
        raise ApplyArgumentError(f"{label}: the arguments fit several definitions: {names}")
    return _closest_failure(failures, args, label)


def _closest_failure(
    failures: list[tuple[Definition, ApplyArgumentError]], args: Sequence[Any], label: str
) -> Binding:
    positions = {e.position for _, e in failures}
    kinds = {e.kind for _, e in failures}
    if len(failures) > 1 and len(positions) == 1 and kinds == {"dtype"}:
        position = positions.pop()
        accepted = ", ".join(
            f"{argument_specs(d, 'value' if position < len(d.inputs) else 'dps')[position][1].dtype.value}"
            f" ({d.name})"
            for d, _ in failures
        )
        got = getattr(args[position], "dtype", type(args[position]).__name__)
        argument = failures[0][1].argument
        raise ApplyArgumentError(
            f"{label}: argument '{argument}': dtype {got} matches no definition; "
            f"expected one of {accepted}",
            position,
            "dtype",
            argument,
        )
    raise max(failures, key=lambda f: f[1].position)[1]


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (value.shape, value.dtype)
    return type(value)


def _device_of(args: Sequence[Any]) -> Any:
    return next((a.device for a in args if isinstance(a, torch.Tensor)), None)


def tensor_guard(tensors: Sequence[torch.Tensor]) -> Callable[..., bool]:
    """One C++ check of every tensor's dtype, device, sizes and strides (and dispatch keys) against
    these: the compiled one (``tensorcheck.py``), else dynamo's ``TensorGuards``, 0.3 us for two
    tensors where reading their shapes and dtypes in Python costs 1.5 (a two-core CPU; on the lent
    GPU hosts 0.13-0.23 us an attribute). A check that always fails where torch has none or will
    not build one: a guard only ever saves work."""
    from kernelarena.dispatch.tensorcheck import tensor_check

    compiled = tensor_check(tensors)
    if compiled is not None and compiled(*tensors):
        return compiled
    try:
        from torch._C._dynamo.guards import TensorGuards

        # Every size and stride given, as ints, one list per tensor (torch's stub says one flat
        # list; the C++ reads one per tensor): a None there would leave that dimension unchecked.
        sizes: Any = [list(t.shape) for t in tensors]
        strides: Any = [list(t.stride()) for t in tensors]
        guard = TensorGuards(*tensors, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides)
        check: Callable[..., bool] = guard.check
        if check(*tensors):
            return check
    except Exception:  # pragma: no cover - a torch without it, or with another signature
        pass
    return _never


def _never(*tensors: Any) -> bool:
    return False


# Guards kept per key: one per layout (strides) and dispatch state (inference mode, no_grad inside a
# custom op) a key's calls arrive with. Past this many, such calls read the key every time.
MAX_GUARDS_PER_KEY = 4


def key_functions(
    candidates: Sequence[Definition],
    include_scalars: bool,
    entries: dict[Any, Any],
    slot: Any = None,
) -> tuple[
    Callable[[tuple[Any, ...]], tuple[Any, ...]],
    Callable[[tuple[Any, ...]], Any],
    Callable[[tuple[Any, ...], tuple[Any, ...], Any], None],
    Guards,
]:
    """``key_of(args)``: the argument count, the first tensor's device, every tensor's shape and
    dtype, every boolean scalar's value (it selects what the call computes: part of the table's
    key), and every other scalar's value when tracing; ``lookup(args)``:
    ``entries[key_of(args)]`` in one frame. Equal keys mean equal checks, so a call whose key was
    seen before needs no checking. Generated as straight-line code: on the hot path a loop over
    argument descriptions would cost more than the whole budget of a microsecond.

    Where every argument of a count is a tensor or a scalar outside the key, a guard decides
    (``tensor_guard``: one C++ call, stricter than the key, so a pass means the same key): the
    caller asks ``guards.hit`` first, the guard that passed last, and calls ``lookup`` only when
    it fails; ``lookup`` then reads the key and makes that key's guard the one asked first
    (``Guards.miss``). ``store(key, args, prepared)`` records a resolved key's prepared call in
    ``entries`` and, where a guard decides, the guard made from ``args``. ``slot``: the compiled
    hot path's copy of ``guards.hit`` (``fastcall.new_slot``), or None."""
    branches, guarded = _branches(candidates, include_scalars)
    guards = Guards(guarded, slot)
    namespace: dict[str, Any] = {
        "_describe": _describe,
        "_device_of": _device_of,
        "entries": entries,
        "miss": guards.miss,
    }
    for name in ("key_of", "lookup"):
        lines = [f"def {name}(a):", "    n = len(a)"]
        for count, body, parts in branches:
            lines.append(f"    if n == {count}:")
            lines += [f"        {line}" for line in body]
            key = f"({', '.join(parts)},)"
            if name == "key_of":
                lines.append(f"        return {key}")
            elif count in guarded:
                checked = ", ".join(f"x{i}" for i in guarded[count])
                lines.append(f"        return miss({count}, {key}, ({checked},))")
            else:
                lines.append(f"        return entries[{key}]")
        lines.append("    raise IndexError(n)")
        exec(compile("\n".join(lines), f"<kernelarena apply {name}>", "exec"), namespace)

    def store(key: tuple[Any, ...], args: tuple[Any, ...], prepared: Any) -> None:
        positions = guarded.get(len(args))
        if positions is not None:  # the guard first: a lookup may read it once the entry is in
            guards.add(len(args), key, [args[i] for i in positions], prepared)
        entries[key] = prepared

    return namespace["key_of"], namespace["lookup"], store, guards


def _branches(
    candidates: Sequence[Definition], include_scalars: bool
) -> tuple[list[tuple[int, list[str], list[str]]], dict[int, list[int]]]:
    """Per argument count: the lines that name its tensors and the parts of its key; and the
    counts where a guard decides the key (every argument a tensor or a scalar outside the key),
    with their tensors' positions."""
    kinds: dict[int, list[set[str]]] = {}
    for definition in candidates:
        for style in styles(definition):
            specs = argument_specs(definition, style)
            slots = kinds.setdefault(len(specs), [set() for _ in specs])
            for slot, (_, spec) in zip(slots, specs, strict=True):
                if spec.shape is not None:
                    slot.add("tensor")
                else:
                    slot.add("flag" if spec.dtype.python_type is bool else "scalar")
    branches: list[tuple[int, list[str], list[str]]] = []
    guarded: dict[int, list[int]] = {}
    for count, slots in sorted(kinds.items()):
        tensors = [i for i, s in enumerate(slots) if s == {"tensor"}]
        parts = [str(count), f"x{tensors[0]}.device" if tensors else "_device_of(a)"]
        for i, slot in enumerate(slots):
            if slot == {"tensor"}:
                parts += [f"x{i}.shape", f"x{i}.dtype"]
            elif "tensor" in slot:
                parts.append(f"_describe(a[{i}])")
            elif include_scalars or "flag" in slot:
                parts.append(f"a[{i}]")
        if tensors and not include_scalars and all(s in ({"tensor"}, {"scalar"}) for s in slots):
            guarded[count] = tensors
        branches.append((count, [f"x{i} = a[{i}]" for i in tensors], parts))
    return branches, guarded


Guard = tuple[Callable[..., bool], Any]  # (check, prepared)
# (argument count, picker of its tensors, check, call, into): what a call site asks first.
Hit = tuple[int, Any, Any, Any, int]
NO_HIT: Hit = (-1, None, None, None, -1)


def _picker(positions: list[int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """The tensors at ``positions`` of an argument tuple, as a tuple, in one C call."""
    if positions == list(range(positions[0], positions[-1] + 1)):
        return itemgetter(slice(positions[0], positions[-1] + 1))
    return itemgetter(*positions)


class Guards:
    """The guards of a call site's keys: per key, up to ``MAX_GUARDS_PER_KEY`` (one per layout and
    dispatch state its calls came with); ``hit``, the one that passed or was made last."""

    def __init__(self, guarded: dict[int, list[int]], slot: Any = None) -> None:
        self.positions = guarded
        self.picks = {count: _picker(positions) for count, positions in guarded.items()}
        self.hit: Hit = NO_HIT
        self.slot = slot  # the compiled hot path's ``hit`` (a fastcall HitSlot), or None
        self.by_key: dict[tuple[Any, ...], list[Guard]] = {}
        self.missed: dict[int, list[Guard]] = {}  # per count, the guards of its last miss's key

    def add(self, count: int, key: tuple[Any, ...], tensors: list[Any], prepared: Any) -> None:
        guard = (tensor_guard(tensors), prepared)
        self.by_key[key] = [guard]
        self._ask_first(count, guard)

    def _ask_first(self, count: int, guard: Guard) -> None:
        call, into = guard[1]
        self.hit = (count, self.picks[count], guard[0], call, into)
        if self.slot is not None:
            self.slot.set(count, self.positions[count], guard[0], call, into)

    def miss(self, count: int, key: tuple[Any, ...], tensors: tuple[Any, ...]) -> Any:
        """The prepared call of ``key``, whose guard the last one was not (KeyError: a key never
        resolved). A miss at another key than the last miss is a change of shape: that key's
        guard becomes the one asked first. The same key missing twice running means its guards do
        not fit these tensors (other strides; inference mode, under which a guard made outside
        it never passes): the one that does is asked first, made if there is none yet."""
        known = self.by_key[key]
        prepared = known[0][1]
        if self.missed.get(count) is not known:
            self.missed[count] = known
            self._ask_first(count, known[0])
            return prepared
        for guard in known:
            if guard[0](*tensors):
                self._ask_first(count, guard)
                return prepared
        if len(known) < MAX_GUARDS_PER_KEY:
            made = (tensor_guard(list(tensors)), prepared)
            known.append(made)
            self._ask_first(count, made)
        return prepared
