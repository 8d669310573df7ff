"""Input sets the judge draws, shares with a sandbox, and checks the sandbox's outputs on (the
checks themselves: ``set_checks``).

A set is one draw of a workload's inputs plus its output buffers, copied into the arena and bound in
the sandbox under an id. The judge may keep a private copy of the inputs: the pristine values the
reference runs on and the mutation check compares with, out of the sandbox's reach.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernelarena.data import Definition, SafetensorsInput, ScalarInput, Workload
from kernelarena.evaluate.judge.references import Reference
from kernelarena.evaluate.judge.request_runs import in_runs
from kernelarena.evaluate.judge.set_checks import SetChecks, in_place
from kernelarena.evaluate.judge.stage_clock import staged
from kernelarena.evaluate.judge.verdicts import check_returned, expect_stream_order, expect_success
from kernelarena.evaluate.options import Options
from kernelarena.evaluate.sandbox.arena import Arena
from kernelarena.evaluate.sandbox.sandboxes import Sandbox
from kernelarena.runtime.inputs import (
    STANDARD,
    Distribution,
    Value,
    allocate_outputs,
    input_bytes,
    poison,
    random_tensor,
)

_set_ids = itertools.count()
# Elements of each input that a partial refill changes (``SetMaker.refill_some``): few, so that a
# cache keyed on a sample of the input's elements rarely sees the change.
PARTIAL_REFILL_ELEMENTS = 2


@dataclass(frozen=True)
class CheckedJob:
    """A job as the judge checks it: an executor's ``Job`` (``evaluate.options``) with its axes
    resolved, where its reference runs, and whether its solution writes into given outputs."""

    definition: Definition
    workload: Workload
    axes: dict[str, int]
    reference: Reference  # where the definition's reference runs (``references``)
    options: Options
    blob_root: Path | None
    destination_passing_style: bool


@dataclass
class SharedSet:
    id: int
    seed: int
    inputs: dict[str, Value]  # shared with the sandbox
    outputs: dict[str, torch.Tensor]  # shared, non-aliased outputs
    private: dict[str, Value] | None = None  # the judge's copy of the inputs
    bytes: int = field(default=0)
    # The reference's outputs for the inputs the set holds now (``SetMaker.expected``).
    expected: dict[str, torch.Tensor] | None = field(default=None, repr=False)
    # The reference run in float64 on them (``SetMaker.precise``); empty where it cannot run so.
    precise: dict[str, torch.Tensor] | None = field(default=None, repr=False)
    distribution: Distribution = STANDARD  # what its seed was drawn from (``inputs.Distribution``)


class SetMaker(SetChecks):
    def __init__(
        self, arena: Arena, sandbox: Sandbox, job: CheckedJob, device: torch.device
    ) -> None:
        self.arena = arena
        self.sandbox = sandbox
        self.job = job
        self.device = device
        self._bound: list[SharedSet] = []
        # Stacked references and bounds by output name and reference tensors (``all_right``).
        self._bounds: dict[
            tuple[Any, ...], tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]
        ] = {}
        # Whether the sandbox tried to capture a CUDA graph of the solution and failed: a later
        # failure may be the broken capture's, not the solution's (the judge retries with events).
        self.capture_failed = False
        arena.hand_to(sandbox)  # another sandbox than the last gets buffers of its own

    def make(
        self, seed: int, keep_private: bool = False, distribution: Distribution = STANDARD
    ) -> SharedSet:
        return self.make_many([seed], keep_private, distribution)[0]

    @staged("make_sets")
    def make_many(
        self, seeds: list[int], keep_private: bool = False, distribution: Distribution = STANDARD
    ) -> list[SharedSet]:
        """A set per seed, bound in the sandbox by one request (rotated sets come by the dozen)."""
        made, bindings = [], []
        for group in self._draw_groups(seeds):
            for seed, private in zip(group, self.draw_many(group, distribution), strict=True):
                shared, binding = self._share(seed, private, keep_private, distribution)
                made.append(shared)
                bindings.append(binding)
        self._synchronize()
        handoffs = self.arena.take_unsent()
        try:
            reply = self.sandbox.request(
                "bind",
                {h.id: h.description() for h in handoffs},
                bindings,
                fds=[h.fd for h in handoffs if h.fd >= 0],
            )
            _expect_ok(reply)
        except BaseException:
            # The sandbox may hold some of the new buffers and not others: the next sets go to
            # buffers made anew (for a replacement sandbox, they would be anyway).
            self.arena.hand_to(None)
            raise
        finally:
            for handoff in handoffs:
                handoff.close()  # the sandbox has its own descriptors now
        self._bound.extend(made)
        return made

    @staged("draw")
    def draw_ahead(self, seeds: list[int]) -> None:
        """``Reference.draw_ahead``: the refills that follow find these seeds' draws kept."""
        self.job.reference.draw_ahead(self.job, self.device, seeds)

    def _draw_groups(self, seeds: list[int]) -> list[list[int]]:
        """``seeds`` in runs drawn at once (``request_runs``): their draws go to ``make_inputs``
        in one request (``draw_many``), and a few large draws are never all held at once."""
        size = input_bytes(self.job.definition, self.job.axes)
        return in_runs(seeds, lambda _: size)

    def _share(
        self,
        seed: int,
        private: dict[str, Value],
        keep_private: bool,
        distribution: Distribution,
    ) -> tuple[SharedSet, tuple[Any, ...]]:
        """One draw of ``seed`` (``private``) copied into the arena, and what the sandbox needs
        to bind it."""
        definition = self.job.definition
        buffers = allocate_outputs(definition, self.job.axes, self.device)
        tensor_names = [n for n in definition.inputs if isinstance(private[n], torch.Tensor)]
        values = [private[n] for n in tensor_names] + list(buffers.values())
        shared, layout = self.arena.share(values)  # type: ignore[arg-type]
        by_name = dict(zip(tensor_names, shared, strict=False))
        inputs: dict[str, Value] = {n: by_name.get(n, private[n]) for n in definition.inputs}
        outputs = dict(zip(buffers, shared[len(tensor_names) :], strict=True))
        # Each argument: ("tensor", index into the set's shared tensors) or ("value", the value).
        arguments = [
            ("tensor", tensor_names.index(n)) if n in by_name else ("value", private[n])
            for n in definition.inputs
        ]
        order = list(outputs)
        slots = [order.index(n) if n in outputs else -1 for n in definition.outputs]
        size = sum(t.numel() * t.element_size() for t in shared)
        made = SharedSet(
            next(_set_ids), seed, inputs, outputs, private if keep_private else None, size
        )
        made.distribution = distribution
        return made, (made.id, layout, arguments, len(tensor_names), slots)

    def refill(self, shared: SharedSet, seed: int, keep_private: bool, poison: bool = True) -> None:
        """New values at the same addresses; outputs poisoned again, or (``poison=False``) left
        holding what the last call wrote, a result for other inputs."""
        fresh = self.draw(seed)
        for name, value in fresh.items():
            target = shared.inputs[name]
            if isinstance(target, torch.Tensor) and isinstance(value, torch.Tensor):
                target.copy_(value)
            else:  # a scalar stays what the sandbox was given: the reference must see the same
                fresh[name] = target
        shared.seed, shared.distribution = seed, STANDARD
        shared.private = fresh if keep_private else None
        shared.expected = shared.precise = None
        if poison:
            self.poison(shared)

    def refill_some(self, shared: SharedSet, seed: int) -> None:
        """New values for a few elements (``PARTIAL_REFILL_ELEMENTS``) of each random
        floating-point input the definition does not constrain, drawn from ``seed`` as a set's
        inputs are (``random_tensor``: the workload's distribution) for those elements alone, not
        a whole set's worth of memory and draws to change two; the rest kept, outputs poisoned. A
        solution that caches results keyed on a sample of its inputs misses this change and
        answers stale.
        Where the reference shapes its inputs (``make_inputs``: layouts derived from each other)
        or an input is of a low-precision float type (codes, scales), the whole set is refilled
        instead, since a few changed elements could break what ties them together."""
        definition = self.job.definition
        low_precision = any(
            spec.dtype.is_low_precision_float for spec in definition.inputs.values()
        )
        if self.job.reference.shapes_inputs or low_precision or in_place(definition):
            self.refill(shared, seed, keep_private=True)
            return
        private = dict(self.given(shared))
        generator = torch.Generator().manual_seed(seed)
        cpu = torch.device("cpu")
        for name, target in shared.inputs.items():
            if (
                not isinstance(target, torch.Tensor)
                or not target.is_floating_point()
                or target.numel() == 0
                or isinstance(self.job.workload.inputs.get(name), (ScalarInput, SafetensorsInput))
                or definition.value_plan.generated(name)
            ):
                continue
            count = min(PARTIAL_REFILL_ELEMENTS, target.numel())
            picked = torch.randint(target.numel(), (count,), generator=generator)
            values = random_tensor(definition.inputs[name], (count,), generator, cpu)
            picked, values = picked.to(target.device), values.to(target.device)
            if target.is_contiguous():
                target.view(-1)[picked] = values
            else:  # a permuted layout: change the same elements through a copy
                whole = target.contiguous().view(-1)
                whole[picked] = values
                target.copy_(whole.view(target.shape))
            kept = private[name]
            assert isinstance(kept, torch.Tensor)
            kept = kept.contiguous().clone()  # a kept draw of other sets' too: never changed
            kept.view(-1)[picked] = values
            private[name] = kept
        shared.private = private
        shared.expected = shared.precise = None
        self.poison(shared)

    def poison(self, shared: SharedSet) -> None:
        self.poison_many([shared])

    def poison_many(self, sets: list[SharedSet]) -> None:
        """Every output of ``sets`` poisoned (``inputs.poison``): the floating-point ones of
        the usual dtypes by one multiplication with NaN across them all (a few launches for a
        timing's dozens of rotated sets), the others filled one by one."""
        floats: dict[torch.dtype, list[torch.Tensor]] = {}
        for shared in sets:
            for name, tensor in shared.outputs.items():
                dtype = self.job.definition.outputs[name].dtype
                if dtype.is_float and not dtype.is_low_precision_float:
                    floats.setdefault(tensor.dtype, []).append(tensor)
                else:
                    poison(tensor, dtype)
        for tensors in floats.values():
            torch._foreach_mul_(tensors, math.nan)

    def forget(self, sets: list[SharedSet]) -> None:
        ids = {s.id for s in sets}
        self._bound = [s for s in self._bound if s.id not in ids]
        if ids and self.sandbox.alive():
            self.sandbox.request("forget", sorted(ids))

    def forget_all(self) -> None:
        """At the end of a job: every set goes, and the arena is reused from its start."""
        try:
            self.forget(list(self._bound))
        except Exception:  # a dead sandbox holds nothing any more
            self._bound = []
        self._bounds.clear()
        self.arena.reset()

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- calls and checks -----------------------------------------------------------------------

    def call(self, shared: SharedSet) -> dict[str, torch.Tensor]:
        self.poison(shared)
        self._synchronize()
        reply = self.sandbox.request("eager", [shared.id], 1, True)
        expect_success(reply)
        expect_stream_order(reply, "the checked call")
        if not self.job.destination_passing_style:
            returned = reply.get("returned")
            check_returned(self.job, returned[0] if isinstance(returned, list) else None)
        return self.produced(shared)


def _expect_ok(reply: dict[str, Any]) -> None:
    expect_success(reply)
    if reply.get("ok") is not True:
        raise RuntimeError(f"the sandbox did not accept a request: {str(reply)[:200]}")
