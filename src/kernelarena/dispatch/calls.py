"""The callables stored per key: a solution adapted to the caller's style, with outputs allocated by
closures made once, so a call after the first does no planning at all.

Four cases: value-returning call of a destination-passing (DPS) solution (allocate, call, return);
DPS call of a DPS solution (call, return the outputs passed); value call of a value-returning
solution (the solution itself); DPS call of a value-returning solution (call, copy into the outputs
passed). Outputs that alias an input (in-place operators) are never passed: the solution writes
the input, and it is returned in that output's place. Every call returns the outputs, one tensor or
a tuple in definition order, as torch's ``out=`` functions do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from kernelarena.compile import Runnable
from kernelarena.data import Definition
from kernelarena.dispatch.signature import Binding, Style, passed_outputs
from kernelarena.runtime.verify import reference_of

Call = Callable[..., Any]
# (call, into): ``into`` says what a call returns. RESULT (-1): what ``call`` returns. 0 or more:
# the argument at that position, which ``call`` writes. ``like_input(k)`` (-2 - k): a new
# contiguous tensor like the argument at position k, passed last to ``call`` and returned (one
# output allocated like an input: the commonest value-returning call of a destination-passing
# solution, written out on the hot path, where a closure's frame cost 220 ns on a 2-core VM).
Prepared = tuple[Call, int]
RESULT = -1


def returning(call: Call) -> Prepared:
    return (call, RESULT)


def like_input(position: int) -> int:
    return -2 - position


def invoke(prepared: Prepared, args: tuple[Any, ...]) -> Any:
    """Call ``prepared`` on ``args`` and return what its ``into`` says."""
    call, into = prepared
    if into == RESULT:
        return call(*args)
    if into >= 0:
        call(*args)
        return args[into]
    out = torch.empty_like(args[-2 - into], memory_format=torch.contiguous_format)
    call(*args, out)
    return out


def _assembler(definition: Definition) -> Callable[[Sequence[Any], Sequence[Any]], Any]:
    """``assemble(inputs, passed)``: every output in definition order (aliased ones from inputs)."""
    inputs = list(definition.inputs)
    order: list[tuple[bool, int]] = []
    passed = 0
    for spec in definition.outputs.values():
        if spec.aliases is None:
            order.append((False, passed))
            passed += 1
        else:
            order.append((True, inputs.index(spec.aliases)))
    if order == [(False, 0)]:
        return lambda _inputs, outs: outs[0]

    def assemble(given: Sequence[Any], outs: Sequence[Any]) -> Any:
        values = tuple(given[i] if aliased else outs[i] for aliased, i in order)
        return values[0] if len(values) == 1 else values

    return assemble


def as_tuple(result: Any) -> tuple[Any, ...]:
    return tuple(result) if isinstance(result, tuple | list) else (result,)


def adapt(fn: Call, dps_solution: bool, binding: Binding) -> Prepared:
    """``fn`` (a solution's entry) called in the caller's style."""
    definition, style = binding.definition, binding.style
    count = len(definition.inputs)
    assemble = _assembler(definition)
    simple = len(definition.outputs) == 1 and not any(
        s.aliases for s in definition.outputs.values()
    )
    if dps_solution and style == "value":
        allocations = [
            (
                definition.shape_of(definition.outputs[n], binding.axes) or (),
                definition.outputs[n].dtype.to_torch(),
            )
            for n in passed_outputs(definition)
        ]
        likes = [_like_input(binding, shape, dtype) for shape, dtype in allocations]
        if simple and likes[0] is not None:
            return (fn, like_input(likes[0]))
        return returning(_allocating(fn, allocations, likes, binding.device, assemble, simple))
    if dps_solution:
        if simple:
            return (fn, count)

        def call_into_many(*args: Any) -> Any:
            fn(*args)
            return assemble(args[:count], args[count:])

        return returning(call_into_many)
    return returning(_value_solution(fn, definition, style, assemble))


def _like_input(binding: Binding, shape: tuple[int, ...], dtype: torch.dtype) -> int | None:
    """The position of an input tensor with the output's shape and dtype, if any: the output is
    allocated like it. ``torch.empty_like`` costs half of ``torch.empty`` with a shape, dtype and
    device (H100 host: 1.9-4.0 against 3.8-7.2 us), more than the GPU time of a small call."""
    definition = binding.definition
    for position, spec in enumerate(definition.inputs.values()):
        if (
            spec.shape is not None
            and spec.dtype.to_torch() == dtype
            and tuple(definition.shape_of(spec, binding.axes) or ()) == tuple(shape)
        ):
            return position
    return None


def _allocating(
    fn: Call,
    allocations: list[tuple[tuple[int, ...], torch.dtype]],
    likes: list[int | None],
    device: torch.device,
    assemble: Callable[[Sequence[Any], Sequence[Any]], Any],
    simple: bool,
) -> Call:
    """``fn`` with new contiguous outputs: like the input at ``likes[k]`` (``_like_input``), or
    from the shape where there is none (one output like an input is ``like_input``'s, not this).
    Written out per case: a frame more per output would cost about as much as the cheaper
    allocation saves on a CPU."""
    empty, empty_like, contiguous = torch.empty, torch.empty_like, torch.contiguous_format
    if simple:
        ((shape, dtype),) = allocations

        def allocate_one(*args: Any) -> Any:
            out = empty(shape, dtype=dtype, device=device)
            fn(*args, out)
            return out

        return allocate_one
    plan = list(zip(likes, allocations, strict=True))

    def allocate_many(*args: Any) -> Any:
        outs = [
            empty(shape, dtype=dtype, device=device)
            if like is None
            else empty_like(args[like], memory_format=contiguous)
            for like, (shape, dtype) in plan
        ]
        fn(*args, *outs)
        return assemble(args, outs)

    return allocate_many


def _value_solution(
    fn: Call,
    definition: Definition,
    style: Style,
    assemble: Callable[[Sequence[Any], Sequence[Any]], Any],
) -> Call:
    count = len(definition.inputs)
    passed = [i for i, s in enumerate(definition.outputs.values()) if s.aliases is None]
    if style == "value":
        if len(passed) == len(definition.outputs):  # nothing in place: its results as they are
            return fn

        def returned(*args: Any) -> Any:
            values = as_tuple(fn(*args))
            return assemble(args, [values[i] for i in passed])

        return returned

    def copied(*args: Any) -> Any:
        values = as_tuple(fn(*args[:count]))
        for target, i in zip(args[count:], passed, strict=True):
            target.copy_(values[i])
        return assemble(args[:count], args[count:])

    return copied


def solution_call(runnable: Runnable, binding: Binding) -> Prepared:
    fn: Call = runnable if runnable.adapt is not None else runnable.fn
    return adapt(fn, runnable.destination_passing_style, binding)


def reference_solution(definition: Definition) -> Call:
    """The reference as a value-returning solution: it returns every output and, like an in-place
    solution, writes the outputs that alias an input into that input."""
    run: Call = reference_of(definition)
    aliased = [
        (k, list(definition.inputs).index(spec.aliases))
        for k, spec in enumerate(definition.outputs.values())
        if spec.aliases is not None
    ]
    if not aliased:
        return run

    def in_place(*inputs: Any) -> Any:
        values = as_tuple(run(*inputs))
        for k, i in aliased:
            inputs[i].copy_(values[k])
        return values

    return in_place


def capture_check(device: torch.device) -> Callable[[], bool] | None:
    """Whether a call is being captured into a CUDA graph, asked per call; None where it cannot be
    (a tensor off the GPU). CUDA never captures the legacy default stream, where eager calls run
    unless the caller chose a stream: there the answer is known from the raw stream handle
    (``_cuda_getCurrentRawStream``, the call Inductor's launchers make) without asking the driver
    (``cudaStreamIsCapturing``: 0.54-0.63 us a call on the lent hosts' CPUs)."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    query = torch.cuda.is_current_stream_capturing
    if raw_stream is None:  # pragma: no cover - every CUDA build of torch has it
        return query

    def capturing() -> bool:
        return raw_stream(index) != 0 and query()

    return capturing


def capture_aware(eager: Prepared, in_graph: Prepared, capturing: Callable[[], bool]) -> Prepared:
    """``in_graph`` while the current stream is being captured, ``eager`` otherwise: for keys whose
    winner by GPU time differs from the winner by eager call time. Costs ``capturing()`` per call
    (``capture_check``), and only at such keys."""

    def call(*args: Any) -> Any:
        return invoke(in_graph if capturing() else eager, args)

    return returning(call)
