"""The sandbox side of a definition's reference: a sandbox process asked to serve a reference
instead of a solution.

A dataset's reference, and its ``make_inputs``, are code kernelarena did not write, so they run
in a sandbox started and confined exactly as a solution's (``sandbox``, ``isolation``,
``confine``), never in the judge. Its caches live in its own temporary folder and its writes are
confined there (``solution_caches.enter_private``), so it cannot plant a build that a solution's
sandbox loads. The judge sends the inputs in its arena and names where each result should go:
a result of that dtype and shape is copied there, any other is described and held until the
judge has made a buffer to its measure and asks for it (``deliver_held``). Replies are JSON that the
judge parses as data; nothing the reference returns is trusted beyond its values.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from kernelarena.evaluate.sandbox.arena import kept_strides, release_unused
from kernelarena.evaluate.sandbox.reference_runs import (
    ReferenceBroken,
    expected_outputs,
    precise_outputs,
    time_reference,
)

if TYPE_CHECKING:
    from kernelarena.evaluate.sandbox.server import Sandbox, _Bound

# Above this much memory kept by the caching allocator after a request, it is given back: the
# judge, in another process, cannot reuse what the reference's sandbox keeps.
_KEPT_CUDA_BYTES = 2 << 30


def serve_reference(
    sandbox: Sandbox, definition_json: dict[str, Any], threads: int
) -> tuple[ReferenceServer, dict[str, Any]]:
    """Make ``sandbox`` serve the definition's reference: its caches in its temporary folder and
    its writes confined there, before any of the reference's code runs; then the reference
    loaded. Returns the server and the reply to the judge."""
    from kernelarena.evaluate.sandbox import solution_caches

    sandbox.caches = solution_caches.enter_private(sandbox.writable, sandbox.confined)
    server = ReferenceServer(sandbox, definition_json, threads)
    return server, {**server.loaded(), "caches": sandbox.caches}


class ReferenceServer:
    """The definition's reference loaded in this sandbox, and its last results held for
    ``deliver_held``."""

    def __init__(self, sandbox: Sandbox, definition_json: dict[str, Any], threads: int) -> None:
        from kernelarena.data import Definition
        from kernelarena.runtime.inputs import load_reference

        self.sandbox = sandbox
        self.device = sandbox.device
        self.definition = Definition.model_validate(definition_json)
        if threads > 0:
            # The judge's count: a CPU reduction's order, so its rounding, follows the threads.
            torch.set_num_threads(threads)
        namespace = load_reference(self.definition)
        run: Any = namespace.get("run")
        self.hook = namespace.get("make_inputs")
        if not callable(run):
            raise ReferenceBroken("it defines no function run")
        self.run: Callable[..., Any] = run
        self.held: list[Any] = []

    def loaded(self) -> dict[str, Any]:
        return {"ok": True, "make_inputs": callable(self.hook)}

    # -- requests (``sandbox.Sandbox.serve`` dispatches ``expect`` and the others here) ---------

    def expect(
        self,
        new_buffers: dict[int, tuple[str, int, bool, bytes]],
        bindings: list[tuple[Any, ...]],
        wanted: tuple[bool, bool],
    ) -> dict[str, Any]:
        """For each bound set in turn, the reference on its inputs (``wanted[0]``) and on them
        upcast to float64 (``wanted[1]``): each set's destinations hold the outputs of each wanted
        run in turn, one per output of the definition. The results not delivered are held, every
        set's after the last one's, for ``deliver_held``."""
        try:
            self.held = []
            replies = []
            for bound in self._bound(new_buffers, bindings):
                try:
                    replies.append(self._expected(bound, wanted))
                except torch.OutOfMemoryError:
                    if any(spec.aliases is not None for spec in self.definition.outputs.values()):
                        raise  # an in-place reference may have written its inputs before it ran out
                    # What this process keeps from earlier requests (results held for delivery,
                    # the caching allocator's free blocks) can be the difference on the largest
                    # sets, where the judge and the paused solution hold their copies too: once
                    # more with all of it given back. (The largest sets come one a request.)
                    if len(bindings) == 1:
                        self.held = []
                    gc.collect()
                    torch.cuda.empty_cache()
                    replies.append(self._expected(bound, wanted))
            return {"ok": True, "sets": replies}
        except ReferenceBroken as broken:
            return {"broken": str(broken)}
        finally:
            self._done()

    def _expected(self, bound: Any, wanted: tuple[bool, bool]) -> dict[str, Any]:
        names = list(self.definition.outputs)
        destinations = list(bound.outputs)
        reply: dict[str, Any] = {}
        expected: list[Any] = []
        upcast: list[Any] = []
        # The float64 run first: the run in the definition's dtypes may then have the
        # request's copies of the inputs, which it may write, without copying them again.
        if wanted[1]:
            inputs = dict(zip(self.definition.inputs, bound.arguments, strict=True))
            found = precise_outputs(self.run, self.definition, inputs)
            upcast = [found.get(name) for name in names]
        if wanted[0]:
            expected = expected_outputs(self.run, self.definition, bound.arguments, own=True)
            reply["expected"] = self._place(expected, destinations[: len(names)], False)
            destinations = destinations[len(names) :]
        if wanted[1]:
            reply["precise"] = self._place(upcast, destinations, False)
        self.held += expected + upcast
        return reply

    def make_inputs(
        self,
        new_buffers: dict[int, tuple[str, int, bool, bytes]],
        bindings: list[tuple[Any, ...]],
        guessed: list[str],
        axes: dict[str, int],
        params: dict[str, Any],
        generator_states: list[bytes],
    ) -> dict[str, Any]:
        """For each bound set in turn, the definition's ``make_inputs`` on the drawn inputs it
        holds, the generator in the state the judge's draw of it left. Each set's destinations:
        one for each input named in ``guessed``, in the layout the judge expects from earlier
        draws. The results not delivered are held, every set's after the last one's, for
        ``deliver_held``."""
        try:
            names = list(self.definition.inputs)
            self.held = []
            replies = []
            bound = self._bound(new_buffers, bindings)
            for one, state in zip(bound, generator_states, strict=True):
                drawn = dict(zip(names, one.arguments, strict=True))
                generator = torch.Generator(device=self.device)
                generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
                result = self.hook(dict(axes), drawn, dict(params), generator, self.device)  # type: ignore[misc]
                if not isinstance(result, Mapping):
                    raise ReferenceBroken(
                        f"make_inputs returned {type(result).__name__}, not a dict"
                    )
                if set(result) != set(names):
                    raise ReferenceBroken(f"make_inputs returned inputs {sorted(map(str, result))}")
                values = [result[name] for name in names]
                targets = dict(zip(guessed, one.outputs, strict=True))
                destinations = [targets.get(name) for name in names]
                replies.append(self._place(values, destinations, True))
                self.held += values
            return {"ok": True, "sets": replies}
        except ReferenceBroken as broken:
            return {"broken": str(broken)}
        finally:
            self._done()

    def deliver_held(
        self,
        new_buffers: dict[int, tuple[str, int, bool, bytes]],
        binding: tuple[Any, ...],
        picks: list[int],
    ) -> dict[str, Any]:
        """Held results (by index, ``picks``) copied into the set's destinations, in turn."""
        try:
            (bound,) = self._bound(new_buffers, [binding])
            with torch.no_grad():
                for index, target in zip(picks, bound.outputs, strict=True):
                    value = self.held[index]
                    if value.dtype != target.dtype or value.shape != target.shape:
                        raise ReferenceBroken(f"held result {index} changed since described")
                    target.copy_(value)
            return {"ok": True}
        except ReferenceBroken as broken:
            return {"broken": str(broken)}
        finally:
            self._done()

    def time_reference(
        self,
        new_buffers: dict[int, tuple[str, int, bool, bytes]],
        bindings: list[tuple[Any, ...]],
        graph: bool,
        options: dict[str, Any],
    ) -> dict[str, Any]:
        """The reference timed over the sets as its solution was (``reference_runs``)."""
        try:
            bound = self._bound(new_buffers, bindings)
            arguments = [b.arguments for b in bound]
            timing = time_reference(self.run, self.device, arguments, graph, options)
            return {"mode": timing.mode, "samples_ms": timing.samples_ms}
        finally:
            self._done()

    # -- helpers --------------------------------------------------------------------------------

    def _bound(
        self, new_buffers: dict[int, tuple[str, int, bool, bytes]], bindings: list[tuple[Any, ...]]
    ) -> list[_Bound]:
        self.sandbox._bind(new_buffers, bindings)
        return [self.sandbox.sets[binding[0]] for binding in bindings]

    def _place(
        self, values: list[Any], destinations: list[torch.Tensor | None], layout: bool
    ) -> list[dict[str, Any] | None]:
        """Each value described; a tensor copied into its destination where that has its dtype
        and shape (and, where ``layout``, the strides the judge keeps of it)."""
        described: list[dict[str, Any] | None] = []
        with torch.no_grad():
            for value, target in zip(values, destinations, strict=False):
                described.append(_describe(value, target, layout))
            described += [_describe(v, None, layout) for v in values[len(destinations) :]]
        return described

    def _done(self) -> None:
        """The request's copies finished (the judge reads its buffers once it answers), then
        every set of the request forgotten (the judge reuses its arena for the next one)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.sandbox.sets.clear()
        release_unused(self.device)
        if (
            self.device.type == "cuda"
            and torch.cuda.memory_reserved(self.device) > _KEPT_CUDA_BYTES
        ):
            torch.cuda.empty_cache()


def _describe(value: Any, target: torch.Tensor | None, layout: bool) -> dict[str, Any] | None:
    """What the judge learns of one result; ``delivered`` where it was copied into ``target``."""
    if value is None:
        return None
    if isinstance(value, bool | int | float):
        return {"value": value}
    if type(value) is not torch.Tensor:
        return {"type": type(value).__name__}
    shape, stride = tuple(value.shape), tuple(value.stride())
    kept = kept_strides(shape, stride)
    fits = (
        target is not None
        and target.dtype == value.dtype
        and tuple(target.shape) == shape
        and (not layout or tuple(target.stride()) == kept)
    )
    if fits:
        assert target is not None
        target.copy_(value)
    return {
        "type": "Tensor",
        "dtype": str(value.dtype),
        "shape": list(shape),
        "stride": list(kept),
        "delivered": fits,
    }
