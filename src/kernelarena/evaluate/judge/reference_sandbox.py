"""The judge's side of a reference's sandbox: one per definition per judge, reused across its
jobs, started again when it dies.

The sandbox is a solution's sandbox (``sandboxes.Sandboxes.fresh``: forked from the CPU zygote,
a spare on a GPU), told to serve the definition's reference instead (``reference_serving``). It
gets an arena of its own: each request copies the inputs it needs (the judge's private copies
stay here) into buffers carved afresh, with a destination for each result shaped as the judge
expects it, and the judge copies the results out before the next request reuses the buffers. A
result of another dtype, shape or layout is described instead and delivered into buffers made to
its measure; the judge expects that layout from then on. Between its definition's jobs the
sandbox is stopped (SIGSTOP), so nothing of the reference runs beside another definition's; a
request that runs past its time limit, a death, a reply that is not one, or a process it leaves
running ends the sandbox and is ``ReferenceFailed``. Draws and the reference's outputs for them
are kept (``kept_draws``): every job of a workload draws the same seeds.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from kernelarena.data import Definition
from kernelarena.evaluate.judge.crosscheck import TimingRejected, reported_timing
from kernelarena.evaluate.judge.kept_draws import KeptDraws, kept_budget, tensor_bytes
from kernelarena.evaluate.judge.reference_replies import (
    BadReply,
    Place,
    brief,
    contiguous,
    described_items,
    described_place,
    fits,
)
from kernelarena.evaluate.judge.references import Reference, last_line
from kernelarena.evaluate.judge.request_runs import REQUEST_SET_BYTES, in_runs
from kernelarena.evaluate.sandbox.arena import Arena, kept_strides
from kernelarena.evaluate.sandbox.sandboxes import Sandbox, SandboxDied, Sandboxes
from kernelarena.evaluate.sandbox.timing import Timing
from kernelarena.runtime.inputs import STANDARD, Distribution, PlainInputs, Value, input_bytes

if TYPE_CHECKING:
    from kernelarena.evaluate.judge.shared_sets import CheckedJob

_RAISED = {
    "expect": "raised",
    "make_inputs": "raised in make_inputs",
    "time_reference": "raised while timed",
}


class SandboxedReference(Reference):
    """A definition's reference in a sandbox of its own (``reference_serving``)."""

    def __init__(self, definition: Definition, device: torch.device, sandboxes: Sandboxes):
        super().__init__(definition)
        self.device = device
        self.sandboxes = sandboxes
        self.arena = Arena(device)
        self.box: Sandbox | None = None
        self.timeout_s = 60.0
        self._layouts: dict[tuple[str, str, str], Place] = {}  # results' layouts seen so far
        # Draws and the reference's outputs for them, kept for the workload's next job.
        self._kept = KeptDraws(kept_budget(device))
        self._ids = itertools.count()

    def ready(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        if self.box is not None and self.box.alive():
            self.box.resume()
            return
        self.close()
        try:
            self.box = self.sandboxes.fresh()
        except SandboxDied as died:
            raise self._failed("could not start its sandbox", last_line(str(died))) from None
        self.box.role = "reference"
        self.arena.hand_to(self.box)
        threads = torch.get_num_threads()
        reply = self._request("reference", self.definition.to_json_dict(), threads, loading=True)
        self.shapes_inputs = reply.get("make_inputs") is True
        self.confinement = f"{self.box.confinement}; {reply.get('caches', '')}"

    def release(self) -> None:
        """Stopped (SIGSTOP) between its definition's jobs, so that nothing of it (a thread, a
        process, a GPU launch) runs beside another definition's; a process it left running ends
        it, and fails the job that just ran as the dataset's."""
        if self.box is None:
            return
        strays = self.box.stop_finding_strays()
        if strays:
            self.close()
            shown = ", ".join(map(str, strays[:8]))
            raise self._failed(
                "left processes running", f"{len(strays)} (pids {shown}); killed with its sandbox"
            )

    def close(self) -> None:
        if self.box is not None:
            self.box.retire()
            self.box = None
        self.arena.hand_to(None)

    # -- the judge's requests -------------------------------------------------------------------

    def draw_many(
        self, job: CheckedJob, device: torch.device, seeds: list[int], distribution: Distribution
    ) -> list[dict[str, Value]]:
        keys = [(job.workload.uuid, seed, distribution) for seed in seeds]
        found = [self._kept.get(key) for key in keys]
        missing = [i for i, kept in enumerate(found) if kept is None]
        if missing:
            made = super().draw_many(job, device, [seeds[i] for i in missing], distribution)
            for i, inputs in zip(missing, made, strict=True):
                self._kept.put(keys[i], inputs)
                found[i] = inputs
        # The caller's dicts; the tensors are read, never written, by the judge.
        return [dict(kept) for kept in found if kept is not None]

    def draw_ahead(self, job: CheckedJob, device: torch.device, seeds: list[int]) -> None:
        """The draws of a pass's refills, one request for all: only where the reference shapes
        its inputs (else no request is saved) and each draw is small enough to be kept."""
        if not self.shapes_inputs or len(seeds) < 2:
            return
        size = input_bytes(job.definition, job.axes)
        if self._kept.keeps(size) and size * len(seeds) <= REQUEST_SET_BYTES:
            self.draw_many(job, device, seeds, STANDARD)

    def shape_inputs_many(
        self, job: CheckedJob, drawn: list[PlainInputs], device: torch.device
    ) -> list[dict[str, Value]]:
        """One request to ``make_inputs`` for each run of ``drawn`` (``request_runs``)."""
        shaped: list[dict[str, Value]] = []
        for batch in in_runs(drawn, lambda one: tensor_bytes(one.inputs)):
            shaped += self._shaped(job, batch)
        return shaped

    def _shaped(self, job: CheckedJob, drawn: list[PlainInputs]) -> list[dict[str, Value]]:
        names = list(self.definition.inputs)
        keys = [("inputs", name, job.workload.uuid) for name in names]
        guessed = [name for name, key in zip(names, keys, strict=True) if key in self._layouts]
        places = [self._layouts[("inputs", name, job.workload.uuid)] for name in guessed]
        self.arena.reset()
        carved = [self._carve([one.inputs[name] for name in names], places) for one in drawn]
        # Bytes, not tensors: a pickled tensor would travel as a handle to shared memory.
        states = [one.generator.get_state().numpy().tobytes() for one in drawn]
        params = dict(job.workload.params or {})
        bindings = [binding for binding, _ in carved]
        reply = self._send("make_inputs", bindings, guessed, dict(job.axes), params, states)
        sets = reply.get("sets")
        if not isinstance(sets, list) or len(sets) != len(drawn):
            raise self._failed("answered something that is not a reply", str(reply)[:200])
        shaped = []
        for index, ((_, targets), described) in enumerate(zip(carved, sets, strict=True)):
            by_name = dict(zip(guessed, targets, strict=True))
            destinations = [by_name.get(name) for name in names]
            values = self._collect(keys, described, destinations, held_from=index * len(names))
            missing = [name for name, value in zip(names, values, strict=True) if value is None]
            if missing:
                raise self._failed("is broken", f"make_inputs returned no value for {missing}")
            shaped.append(dict(zip(names, values, strict=True)))
        return shaped  # type: ignore[return-value]

    def outputs_many(
        self,
        job: CheckedJob,
        draws: list[dict[str, Value]],
        expected: bool = True,
        precise: bool = False,
    ) -> list[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]]:
        found = [
            [self._kept.outputs(inputs, False), self._kept.outputs(inputs, True)]
            for inputs in draws
        ]
        for wanted in ((True, True), (True, False), (False, True)):
            asked = [
                i
                for i, kept in enumerate(found)
                if (expected and kept[0] is None, precise and kept[1] is None) == wanted
            ]
            if not asked:
                continue
            computed = self._computed(job, [draws[i] for i in asked], wanted)
            for i, values in zip(asked, computed, strict=True):
                for upcast in (0, 1):
                    if wanted[upcast]:
                        found[i][upcast] = values[upcast]
                        self._kept.keep_outputs(draws[i], bool(upcast), values[upcast])
        return [
            ((kept[0] or {}) if expected else {}, (kept[1] or {}) if precise else {})
            for kept in found
        ]

    def _computed(
        self, job: CheckedJob, draws: list[dict[str, Value]], wanted: tuple[bool, bool]
    ) -> list[list[dict[str, torch.Tensor]]]:
        """For each draw, the runs ``wanted`` (in the definition's dtypes, in float64), all in
        one request."""
        names = list(self.definition.outputs)
        groups = [g for g, want in zip(("expected", "precise"), wanted, strict=True) if want]
        keys = [(group, name, job.workload.uuid) for group in groups for name in names]
        places = [self._layouts.get(key) or self._guess(job, key) for key in keys]
        self.arena.reset()
        carved = [
            self._carve([inputs[n] for n in self.definition.inputs], places) for inputs in draws
        ]
        reply = self._send("expect", [binding for binding, _ in carved], wanted)
        sets = reply.get("sets")
        if not isinstance(sets, list) or len(sets) != len(draws):
            raise self._failed("answered something that is not a reply", str(reply)[:200])
        results = []
        for index, ((_, targets), one) in enumerate(zip(carved, sets, strict=True)):
            one = one if isinstance(one, dict) else {}
            described = [
                item for group in groups for item in described_items(one.get(group), len(names))
            ]
            values = self._collect(keys, described, list(targets), held_from=index * len(keys))
            found: list[dict[str, torch.Tensor]] = [{}, {}]
            for (group, name, _), value in zip(keys, values, strict=True):
                if isinstance(value, torch.Tensor):
                    found[group == "precise"][name] = value
                elif group == "expected":
                    raise self._failed("is broken", f"output '{name}' is not a tensor")
            results.append(found)
        return results

    def time(
        self, job: CheckedJob, device: torch.device, draws: list[dict[str, Value]], graph: bool
    ) -> Timing:
        self.arena.reset()
        names = list(self.definition.inputs)
        bindings = [self._carve([draw[name] for name in names], [])[0] for draw in draws]
        reply = self._send("time_reference", bindings, graph, asdict(job.options))
        try:
            return reported_timing(reply)
        except TimingRejected as rejected:
            raise self._failed("was timed wrongly", str(rejected)) from None

    # -- the arena and the sandbox ----------------------------------------------------------------

    def _guess(self, job: CheckedJob, key: tuple[str, str, str]) -> Place:
        """Where a result should fit: the output's dtype and shape; for the float64 run, float64
        where the output is of a float type that upcasts."""
        group, name, _ = key
        spec = self.definition.outputs[name]
        shape = tuple(self.definition.shape_of(spec, job.axes) or ())
        dtype = spec.dtype.to_torch()
        if group == "precise" and spec.dtype.is_float and not spec.dtype.is_low_precision_float:
            dtype = torch.float64
        return contiguous(dtype, shape)

    def _carve(
        self, arguments: list[Value], places: list[Place]
    ) -> tuple[tuple[Any, ...], list[torch.Tensor]]:
        """A set of ``arguments`` (copied in) and destinations at ``places``, after what this
        request carved so far: the binding the sandbox maps it by, and the destinations."""
        tensors = [v for v in arguments if isinstance(v, torch.Tensor)]
        own = [(t.dtype, tuple(t.shape), kept_strides(tuple(t.shape), t.stride())) for t in tensors]
        views, layout = self.arena.carve(own + places)
        for view, tensor in zip(views, tensors, strict=False):
            view.copy_(tensor)
        index = itertools.count()
        items = [
            ("tensor", next(index)) if isinstance(v, torch.Tensor) else ("value", v)
            for v in arguments
        ]
        slots = list(range(len(places)))
        return (next(self._ids), layout, items, len(tensors), slots), views[len(tensors) :]

    def _collect(
        self,
        keys: list[tuple[str, str, str]],
        described: Any,
        targets: list[torch.Tensor | None],
        held_from: int = 0,
    ) -> list[Value | None]:
        """The results as the sandbox described them: copied out of their destinations, or
        delivered into buffers made to measure (and that layout expected from now on). The
        sandbox holds the results of a request's sets in turn: these from ``held_from`` on."""
        if not isinstance(described, list) or len(described) != len(keys):
            raise self._failed("answered something that is not a reply", str(described)[:200])
        values: list[Value | None] = [None] * len(keys)
        pending: list[tuple[int, Place]] = []
        for index, (key, item, target) in enumerate(zip(keys, described, targets, strict=False)):
            if item is None:
                continue
            if isinstance(item, dict) and isinstance(item.get("value"), bool | int | float):
                values[index] = item["value"]
                continue
            place = self._place_of(item)
            if item.get("delivered") is True and target is not None and fits(target, place):
                values[index] = target.clone()
            else:
                pending.append((index, place))
                self._layouts[key] = place
        if pending:
            binding, made = self._carve([], [place for _, place in pending])
            self._send("deliver_held", binding, [held_from + index for index, _ in pending])
            for (index, _), target in zip(pending, made, strict=True):
                values[index] = target.clone()
        return values

    def _place_of(self, item: Any) -> Place:
        try:
            return described_place(item)
        except BadReply as bad:
            raise self._failed(bad.what, bad.detail) from None

    def _send(self, operation: str, bindings: Any, *extra: Any) -> dict[str, Any]:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the copies into the arena, before it reads them
        # A sandbox that fails to take them is ended (``_request``), and its buffers with it.
        handoffs = self.arena.take_unsent()
        try:
            buffers = {h.id: h.description() for h in handoffs}
            fds = [h.fd for h in handoffs if h.fd >= 0]
            reply: dict[str, Any] = self._request(operation, buffers, bindings, *extra, fds=fds)
            return reply
        finally:
            for handoff in handoffs:
                handoff.close()

    def _request(self, *message: Any, fds: list[int] | None = None, loading: bool = False) -> Any:
        """One request; its failures the reference's (``ReferenceFailed``)."""
        box = self.box
        assert box is not None
        try:
            reply = box.request(*message, timeout=self.timeout_s, fds=fds or ())
        except SandboxDied as died:
            self.close()
            said = str(died)
            if said.startswith("the sandbox did not answer"):  # still at work: killed
                what = said.removeprefix("the sandbox ")
                raise self._failed(what, "its sandbox was killed") from None
            raise self._failed("failed", brief(said)) from None
        if "error" in reply:
            # Raised before or while it read the request's descriptors: it starts again.
            self.close()
            said = last_line(str(reply["error"]))
            if not loading and "OutOfMemoryError" in said:
                # The device's memory, shared with the judge's sets and the paused solution's
                # process, was short: the workload is too large to judge here, not the
                # dataset's mistake (``outcomes.JUDGE_OUT_OF_MEMORY``).
                raise torch.OutOfMemoryError(f"the reference's sandbox: {said}")
            what = (
                "does not load" if loading else _RAISED.get(message[0], f"raised in {message[0]}")
            )
            raise self._failed(what, said, permanent=loading)
        if "broken" in reply:
            raise self._failed("is broken", str(reply["broken"])[:300], permanent=loading)
        return reply
