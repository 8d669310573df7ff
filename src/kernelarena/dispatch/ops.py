"""Operators as functions and ``torch.library`` custom ops, generated from Definitions.

One operator per family (the ``family:<name>`` tag: rmsnorm_fp32/fp16/bf16 become ``rmsnorm``,
told apart by dtype at call time). A family whose definitions share input dtypes (linear_gelu_fp16
and linear_silu_fp16) is split by the definition name without its last ``_`` part
(``linear_gelu``, ``linear_silu``); what is still ambiguous becomes one operator per definition.

Each operator is a plain function, value-returning, that goes through apply (in eager mode straight
to the apply call site, with no dispatcher cost) and a custom op ``torch.ops.<namespace>.<name>``
that the function calls under ``torch.compile``. The schema follows the inputs (tensors, and
``float``/``int``/``bool`` scalars); an output that aliases an input marks that input as mutated
and is not returned by the custom op (custom ops may not return their inputs), while the plain
function returns every output. The fake implementation allocates outputs by the shape rules
(derived axes evaluated on symbolic sizes), so shapes stay symbolic under dynamic compilation.
"""

from __future__ import annotations

import inspect
import keyword
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from kernelarena.data import AxisVar, Definition, TraceSet
from kernelarena.data.expressions import evaluate
from kernelarena.dispatch.apply import CallSite, current_runtime, routed
from kernelarena.dispatch.runtime import ApplyRuntime

_SCALAR_TYPES = {bool: "bool", int: "int", float: "float"}
_library_runtime: ApplyRuntime | None = None
_library_lock = threading.Lock()
PROBLEMS: list[str] = []  # operators that could not be made, and why


def _family(definition: Definition) -> str:
    tags = [t.removeprefix("family:") for t in definition.tags if t.startswith("family:")]
    return tags[0] if tags else definition.name


def _interface(definition: Definition) -> tuple[Any, ...]:
    inputs = tuple((n, s.shape is None) for n, s in definition.inputs.items())
    outputs = tuple((n, s.aliases) for n, s in definition.outputs.items())
    return inputs, outputs


def _distinct(members: Sequence[Definition]) -> bool:
    """One interface, and every member told apart by its input dtypes and const axes."""
    signatures = {
        (tuple(s.dtype for s in d.inputs.values()), tuple(sorted(d.const_axes.items())))
        for d in members
    }
    return len(signatures) == len(members) and len({_interface(d) for d in members}) == 1


def operator_groups(definitions: Iterable[Definition]) -> dict[str, list[Definition]]:
    families: dict[str, list[Definition]] = {}
    for definition in definitions:
        families.setdefault(_family(definition), []).append(definition)
    groups: dict[str, list[Definition]] = {}
    for family, members in families.items():
        if _distinct(members):
            groups.setdefault(family, []).extend(members)
            continue
        for definition in members:
            stem = definition.name.rsplit("_", 1)[0] if "_" in definition.name else definition.name
            groups.setdefault(stem, []).append(definition)
    final: dict[str, list[Definition]] = {}
    for name, members in groups.items():
        if _distinct(members) and name not in final:
            final[name] = members
        else:
            final.update((d.name, [d]) for d in members)
    return {n: m for n, m in final.items() if n.isidentifier() and not keyword.iskeyword(n)}


def schema(definition: Definition) -> str:
    arguments = []
    for name, spec in definition.inputs.items():
        if spec.shape is None:
            arguments.append(f"{_SCALAR_TYPES[spec.dtype.python_type]} {name}")
        else:
            mutated = any(o.aliases == name for o in definition.outputs.values())
            arguments.append(f"Tensor(a{len(arguments)}!) {name}" if mutated else f"Tensor {name}")
    returned = [n for n, s in definition.outputs.items() if s.aliases is None]
    results = "Tensor" if len(returned) == 1 else f"({', '.join('Tensor' for _ in returned)})"
    return f"({', '.join(arguments)}) -> {results}"


def _library_default() -> ApplyRuntime:
    """Runs operators while apply is off: the library without traces, so the default solutions."""
    global _library_runtime
    with _library_lock:
        if _library_runtime is None:
            from kernelarena.library import load_library

            library = load_library()
            library.traces = {}
            _library_runtime = ApplyRuntime(library, use_cache=False)
    return _library_runtime


def _default_fallback(runtime: ApplyRuntime, definition: Definition, device: Any) -> Any:
    return runtime.default_solution(definition, device)


def _fake_outputs(members: Sequence[Definition], args: Sequence[Any]) -> list[torch.Tensor]:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    definition = next(
        (
            d
            for d in members
            if all(
                a.dtype == s.dtype.to_torch()
                for a, s in zip(args, d.inputs.values(), strict=False)
                if s.shape is not None and isinstance(a, torch.Tensor)
            )
        ),
        members[0],
    )
    sizes: dict[str, Any] = dict(definition.const_axes)
    for value, spec in zip(args, definition.inputs.values(), strict=False):
        for axis, size in zip(spec.shape or [], getattr(value, "shape", ()), strict=False):
            sizes.setdefault(axis, size)
    pending = {n: a.expression for n, a in definition.axes.items() if isinstance(a, AxisVar)}
    for _ in range(len(pending)):  # derived axes in dependency order, on symbolic sizes
        for name, expression in pending.items():
            if name not in sizes and expression:
                try:
                    sizes[name] = evaluate(expression, sizes)
                except ValueError:
                    continue
    device = tensors[0].device if tensors else torch.device("cpu")
    return [
        torch.empty(
            [sizes[a] for a in spec.shape or []], dtype=spec.dtype.to_torch(), device=device
        )
        for spec in definition.outputs.values()
        if spec.aliases is None
    ]


def make_operator(
    name: str, members: Sequence[Definition], namespace: str = "kernelarena"
) -> Callable[..., Any]:
    """The plain function for ``members`` (with ``.custom_op`` attached), registering the op."""
    first = members[0]
    names = [d.name for d in members]
    inputs = list(first.inputs)
    signature = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in inputs]
    )
    aliased = [
        (k, inputs.index(s.aliases)) for k, s in enumerate(first.outputs.values()) if s.aliases
    ]
    eager = _routed_eager(name, names, signature, namespace)
    custom = _custom_op(f"{namespace}::{name}", members, eager, aliased)
    compiled_op = getattr(getattr(torch.ops, namespace), name)

    def compiled(*args: Any, **kwargs: Any) -> Any:
        result = compiled_op(*args, **kwargs)
        if not aliased:
            return result
        bound = signature.bind(*args, **kwargs).arguments
        return _with_aliased(result, [bound[inputs[i]] for _, i in aliased], aliased)

    operator = _operator(eager, compiled, inputs)
    operator.__signature__ = signature  # type: ignore[attr-defined]
    operator.__qualname__ = operator.__name__ = name
    operator.__doc__ = f"{first.description or name}\n\nDefinitions: {', '.join(names)}."
    operator.custom_op = custom  # type: ignore[attr-defined]
    operator.__kernelarena_site__ = eager.__kernelarena_site__  # type: ignore[attr-defined]
    operator.definitions = names  # type: ignore[attr-defined]
    return operator


def _routed_eager(
    name: str, names: list[str], signature: inspect.Signature, namespace: str
) -> Callable[..., Any]:
    """The operator in eager mode: apply's call site over ``names``, in the runtime of apply where
    that holds them all, else in the library's without traces (its default solutions)."""

    def unreachable(*args: Any) -> Any:
        raise RuntimeError(f"{name}: no runtime holds its definitions {names}")

    unreachable.__signature__ = signature  # type: ignore[attr-defined]
    unreachable.__qualname__ = unreachable.__name__ = name

    def runtime_for() -> ApplyRuntime:
        runtime = current_runtime()
        if runtime is not None and all(n in runtime.trace_set.definitions for n in names):
            return runtime
        return _library_default()

    label = f"{namespace}.ops.{name}" if namespace == "kernelarena" else f"{namespace}::{name}"
    return routed(CallSite(names, unreachable, _default_fallback, runtime_for, label))


def _operator(
    eager: Callable[..., Any], compiled: Callable[..., Any], inputs: list[str]
) -> Callable[..., Any]:
    """The operator's function: ``eager`` (apply's call site) in eager code, ``compiled`` (the
    custom op) while torch.compile traces it. A Python function either way, so that
    torch.compile can trace it (it cannot trace the compiled hot path's ``FastCall``)."""
    site: CallSite = eager.__kernelarena_site__  # type: ignore[attr-defined]
    is_compiling = torch.compiler.is_compiling
    if site.fast is not None:
        named = _named_operator(eager, compiled, inputs)
        if named is not None:
            return named

        def operator(*args: Any, **kwargs: Any) -> Any:
            if not is_compiling():
                return eager(*args, **kwargs)  # the compiled hot path
            return compiled(*args, **kwargs)

        return operator
    empty_like, contiguous = torch.empty_like, torch.contiguous_format

    def written_out(*args: Any, **kwargs: Any) -> Any:
        if not is_compiling():
            # routed()'s wrapper, written out here: a Python frame less on every call.
            if not kwargs and not site.passthrough:
                count, pick, check, call, into = site.guards.hit
                if len(args) == count and check(*pick(args)):  # calls.invoke(), written out
                    if into == -1:
                        return call(*args)
                    if into >= 0:
                        call(*args)
                        return args[into]
                    out = empty_like(args[-2 - into], memory_format=contiguous)
                    call(*args, out)
                    return out
            return eager(*args, **kwargs)
        return compiled(*args, **kwargs)

    return written_out


def _named_operator(
    eager: Callable[..., Any], compiled: Callable[..., Any], inputs: list[str]
) -> Callable[..., Any] | None:
    """The operator with the definition's inputs as its parameters, generated: keywords are
    bound by Python itself, and a call passes no tuple or dict of its own (``*args, **kwargs``
    cost about 45 ns a call on a 2-core VM). None where an input's name cannot be a
    parameter's."""
    namespace: dict[str, Any] = {
        "_kernelarena_eager": eager,
        "_kernelarena_compiled": compiled,
        "_kernelarena_dynamo": getattr(torch.compiler, "is_dynamo_compiling", None),
        "_kernelarena_compiler": torch.compiler,
        "_kernelarena_is_compiling": torch.compiler.is_compiling,
    }
    if any(not n.isidentifier() or keyword.iskeyword(n) or n in namespace for n in inputs):
        return None
    listed = ", ".join(inputs)
    code = (
        f"def operator({listed}):\n"
        f"    if {_eager_test()}:\n"
        f"        return _kernelarena_eager({listed})\n"
        f"    return _kernelarena_compiled({listed})\n"
    )
    exec(compile(code, "<kernelarena operator>", "exec"), namespace)
    operator: Callable[..., Any] = namespace["operator"]
    return operator


def _eager_test() -> str:
    """``not torch.compiler.is_compiling()`` at a third of its cost (two Python calls, 190 ns in
    an operator's call on a 2-core VM, against 70): Dynamo answers ``is_dynamo_compiling()``
    with True while it traces, so it never reads the flag after it; eagerly the flag is what
    ``is_compiling()`` returns (True while ``torch.export`` runs the function, which must then
    take the custom op too). ``is_compiling()`` itself where this torch has neither."""
    if isinstance(getattr(torch.compiler, "_is_compiling_flag", None), bool) and hasattr(
        torch.compiler, "is_dynamo_compiling"
    ):
        return "not _kernelarena_dynamo() and not _kernelarena_compiler._is_compiling_flag"
    return "not _kernelarena_is_compiling()"  # pragma: no cover - torch without them


def _custom_op(
    qualified: str,
    members: Sequence[Definition],
    eager: Callable[..., Any],
    aliased: list[tuple[int, int]],
) -> Any:
    """The custom op ``namespace::name`` over ``eager``, with its fake. Custom ops may not return
    their inputs: the outputs that alias one are left out (the schema marks those inputs as
    mutated)."""
    inputs = list(members[0].inputs)
    skipped = {k for k, _ in aliased}

    def implementation(*args: Any) -> Any:
        values = eager(*args)
        values = values if isinstance(values, tuple) else (values,)
        return _single([v for k, v in enumerate(values) if k not in skipped])

    mutated = [inputs[i] for _, i in aliased]
    custom = torch.library.custom_op(
        qualified, implementation, mutates_args=mutated, schema=schema(members[0])
    )
    custom.register_fake(lambda *args: _single(_fake_outputs(members, args)))
    return custom


def _with_aliased(result: Any, written: list[Any], aliased: list[tuple[int, int]]) -> Any:
    """The custom op's ``result`` with the inputs it wrote (``written``, one per aliased output)
    put back in their outputs' places: what the plain function returns."""
    if result is None:
        produced: list[Any] = []
    else:
        produced = list(result) if isinstance(result, tuple | list) else [result]
    for (k, _), value in zip(aliased, written, strict=True):
        produced.insert(k, value)
    return produced[0] if len(produced) == 1 else tuple(produced)


def _single(outputs: list[torch.Tensor]) -> Any:
    """A custom op's result: one tensor, a tuple, or None when every output is written in place."""
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def build_operators(
    trace_set: TraceSet | None = None, namespace: str = "kernelarena"
) -> dict[str, Callable[..., Any]]:
    if trace_set is None:
        from kernelarena.library import load_library

        trace_set = load_library()
    groups = operator_groups(trace_set.definitions.values())
    operators: dict[str, Callable[..., Any]] = {}
    for name, members in groups.items():
        try:
            operators[name] = make_operator(name, members, namespace)
        except Exception as error:  # one odd definition never hides the other operators
            PROBLEMS.append(f"{name}: {type(error).__name__}: {error}")
    return operators
