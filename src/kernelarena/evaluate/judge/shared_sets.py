"""Input sets the judge draws, shares with a sandbox, and checks the sandbox's outputs on.

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

from kernelarena.data import Definition, Workload
from kernelarena.evaluate.judge.references import Reference
from kernelarena.evaluate.judge.stage_clock import staged
from kernelarena.evaluate.judge.verdicts import check_returned, expect_stream_order, expect_success
from kernelarena.evaluate.options import Options
from kernelarena.evaluate.sandbox.arena import Arena
from kernelarena.evaluate.sandbox.error_ratio import ErrorRatio, ratios
from kernelarena.evaluate.sandbox.sandboxes import Sandbox
from kernelarena.runtime.compare import (
    Comparison,
    compare,
    fast_bound,
    fast_checkable,
    first_changed_input,
    within_bound,
)
from kernelarena.runtime.inputs import (
    STANDARD,
    Distribution,
    Value,
    allocate_outputs,
    poison,
)

_set_ids = itertools.count()
# Elements of each input that a partial refill changes (``SetMaker.refill_some``): few, so that a
# cache keyed on a sample of the input's elements rarely sees the change.
PARTIAL_REFILL_ELEMENTS = 2
# The sets whose reference outputs one request computes hold at most this many bytes (inputs and
# outputs): a timing's rotated sets come by the dozen, and each request costs a round trip.
EXPECT_BATCH_BYTES = 256 << 20
# ``SetMaker.all_right`` stacks the outputs of up to this many bytes of sets (in float32) into one
# comparison; and keeps the stacked references and bounds of this many groups of sets.
STACKED_CHECK_BYTES = 256 << 20
KEPT_BOUNDS = 4


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


def in_place(definition: Definition) -> bool:
    """Whether an output of ``definition`` is one of its inputs, written in place."""
    return any(spec.aliases for spec in definition.outputs.values())


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


class SetMaker:
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

    @staged("draw")
    def draw(self, seed: int, distribution: Distribution = STANDARD) -> dict[str, Value]:
        return self.job.reference.draw(self.job, self.device, seed, distribution)

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
        for seed in seeds:
            shared, binding = self._share(seed, keep_private, distribution)
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

    def _share(
        self, seed: int, keep_private: bool, distribution: Distribution
    ) -> tuple[SharedSet, tuple[Any, ...]]:
        """One draw copied into the arena, and what the sandbox needs to bind it."""
        definition = self.job.definition
        private = self.draw(seed, distribution)
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
        """New values for a few elements (``PARTIAL_REFILL_ELEMENTS``) of each floating-point input
        the definition does not constrain, taken from a fresh draw of ``seed`` (so within the
        workload's distribution), the rest kept; outputs poisoned. A solution that caches results
        keyed on a sample of its inputs misses this change and answers stale.
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
        fresh = self.draw(seed)
        private = dict(self.given(shared))
        generator = torch.Generator().manual_seed(seed)
        for name, target in shared.inputs.items():
            value = fresh.get(name)
            if (
                not isinstance(target, torch.Tensor)
                or not isinstance(value, torch.Tensor)
                or not target.is_floating_point()
                or target.numel() == 0
                or definition.value_plan.generated(name)
            ):
                continue
            count = min(PARTIAL_REFILL_ELEMENTS, target.numel())
            picked = torch.randint(target.numel(), (count,), generator=generator)
            picked = picked.to(target.device)
            if target.is_contiguous():
                target.view(-1)[picked] = value.reshape(-1)[picked]
            else:  # a permuted layout: change the same elements through a copy
                whole = target.contiguous().view(-1)
                whole[picked] = value.reshape(-1)[picked]
                target.copy_(whole.view(target.shape))
            kept = private[name]
            assert isinstance(kept, torch.Tensor)
            kept = kept.contiguous().clone()
            kept.view(-1)[picked] = value.reshape(-1)[picked]
            private[name] = kept
        shared.private = private
        shared.expected = shared.precise = None
        self.poison(shared)

    def given(self, shared: SharedSet) -> dict[str, Value]:
        """The inputs the set was given: the judge's private copy, or where it keeps none, a
        fresh draw of its seed (``pristine``)."""
        return shared.private if shared.private is not None else self.pristine(shared)

    def pristine(self, shared: SharedSet) -> dict[str, Value]:
        """What the set was given, drawn again from its seed (for sets that keep no copy)."""
        return self.draw(shared.seed, shared.distribution)

    @staged("error_ratios")
    def error_ratios(
        self,
        shared: SharedSet,
        produced: dict[str, torch.Tensor],
        expected: dict[str, torch.Tensor],
    ) -> list[ErrorRatio]:
        """The solution's error over the reference's own, per output, both against the
        reference run in float64 on the set's inputs (``error_ratio``); none where the reference
        cannot run so, or the inputs would be too large in float64."""
        precise = self.precise(shared)
        return ratios(self.job.definition, produced, expected, precise) if precise else []

    def precise(self, shared: SharedSet) -> dict[str, torch.Tensor]:
        """The reference's outputs run on the set's inputs upcast to float64
        (``error_ratio.precise_inputs``), kept with the set until a refill; empty where the
        reference cannot run so (written for its dtypes only) or the inputs would be too large."""
        if shared.precise is None:
            given = self.given(shared)
            _, shared.precise = self.job.reference.outputs(
                self.job, given, expected=False, precise=True
            )
        return shared.precise

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

    def produced(self, shared: SharedSet) -> dict[str, torch.Tensor]:
        produced = dict(shared.outputs)
        for name, spec in self.job.definition.outputs.items():
            if spec.aliases is not None:
                value = shared.inputs[spec.aliases]
                assert isinstance(value, torch.Tensor)
                produced[name] = value
        return produced

    def expected(self, shared: SharedSet) -> dict[str, torch.Tensor]:
        """The reference's outputs for the inputs the set holds (``expect``)."""
        self.expect([shared])
        assert shared.expected is not None
        return shared.expected

    @staged("expected")
    def expect(self, sets: list[SharedSet]) -> None:
        """The reference's outputs for the inputs each set holds, for those that lack them, run
        on a copy of the judge's private inputs (a fresh draw of its seed where it keeps none) and
        kept with the set until a refill changes them; as few requests to the reference as it
        takes (a timing's rotated sets come by the dozen). A set that keeps its inputs is a
        trial's, whose error ratio needs the float64 run too: both come in one request."""
        for precise in (False, True):
            wanted = [
                s
                for s in sets
                if s.expected is None and (s.private is not None and s.precise is None) == precise
            ]
            for batch in _batches(wanted):
                self._expect_batch(batch, precise)

    def _expect_batch(self, batch: list[SharedSet], precise: bool) -> None:
        """One request's sets (``expect``); their draws go with the call, before the next batch's
        are made (a set of the largest workloads takes a tenth of the device's memory)."""
        draws = [self.given(s) for s in batch]
        found = self.job.reference.outputs_many(self.job, draws, precise=precise)
        for shared, (expected, upcast) in zip(batch, found, strict=True):
            shared.expected = expected
            if precise:
                shared.precise = upcast

    @staged("all_right")
    def all_right(self, checked: list[SharedSet]) -> bool:
        """Whether every output of ``checked`` is within its tolerance of the reference's, found
        with one wait for the GPU (``all_within``); False where that shortcut cannot say so, and
        ``compare_all`` must. Sets that ``check_together`` are compared as one stacked tensor
        against a stacked reference and bound prepared once (a pass over the rotated sets of a
        timing otherwise costs the host a dozen launches a set)."""
        definition = self.job.definition
        self.expect(checked)
        together = self.check_together(checked)
        verdicts = []
        for name in definition.outputs:
            tolerance = definition.tolerance_for(name)
            produced = [self.produced(s)[name] for s in checked]
            expected = [s.expected[name] for s in checked]  # type: ignore[index]
            if not all(
                fast_checkable(p, e, tolerance) for p, e in zip(produced, expected, strict=True)
            ):
                return False
            if together:
                verdicts.append(
                    within_bound(torch.stack(produced), *self._stacked_bound(expected, name))
                )
            else:
                verdicts += [
                    within_bound(p, *fast_bound(e, tolerance))
                    for p, e in zip(produced, expected, strict=True)
                ]
        return bool(torch.stack(verdicts).all()) if verdicts else False

    def check_together(self, sets: list[SharedSet]) -> bool:
        """Whether ``all_right`` compares ``sets`` stacked: more than one, with outputs of one
        shape, whose float32 copies stay within ``STACKED_CHECK_BYTES``."""
        if len(sets) < 2:
            return False
        first = sets[0].outputs
        elements = sum(t.numel() for t in first.values())
        alike = all(
            {n: (t.shape, t.dtype) for n, t in s.outputs.items()}
            == {n: (t.shape, t.dtype) for n, t in first.items()}
            for s in sets[1:]
        )
        return (
            alike
            and not in_place(self.job.definition)
            and 4 * elements * len(sets) <= STACKED_CHECK_BYTES
        )

    def _stacked_bound(
        self, expected: list[torch.Tensor], name: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The stacked reference and bound for ``expected`` (``fast_bound``), kept while the same
        reference tensors come back (a refill makes new ones)."""
        key = (name, *map(id, expected))
        kept = self._bounds.get(key)
        if kept is None:
            stacked = torch.stack(expected)
            kept = (expected, *fast_bound(stacked, self.job.definition.tolerance_for(name)))
            if len(self._bounds) >= KEPT_BOUNDS:
                self._bounds.pop(next(iter(self._bounds)))
            self._bounds[key] = kept  # the tensors held with it: their ids stay theirs
        return kept[1], kept[2]

    @staged("compare")
    def compare_all(
        self,
        produced: dict[str, torch.Tensor],
        expected: dict[str, torch.Tensor],
        shared: SharedSet | None = None,
    ) -> list[Comparison]:
        """Each output against the reference's; where one fails and ``shared`` is given, against
        the reference run in float64 too (``more_accurate``)."""
        definition = self.job.definition
        comparisons = [
            compare(
                name, produced[name], expected[name], spec.dtype, definition.tolerance_for(name)
            )
            for name, spec in definition.outputs.items()
        ]
        if shared is None or all(c.ok for c in comparisons):
            return comparisons
        precise = self.precise(shared)
        return [c if c.ok else self.more_accurate(c, produced, precise) for c in comparisons]

    def more_accurate(
        self,
        failed: Comparison,
        produced: dict[str, torch.Tensor],
        precise: dict[str, torch.Tensor],
    ) -> Comparison:
        """An output the reference's does not match, passed where it matches the reference
        computed in float64 within the same tolerance: a solution more accurate than the reference
        is not wrong. Seen on an H100: the fp16 reference (cuBLAS) of a GEMM at K=14336 sat a few
        units in the last place from three published solutions that agreed with each other
        exactly."""
        truth = precise.get(failed.name)
        if truth is None:
            return failed
        spec = self.job.definition.outputs[failed.name]
        tolerance = self.job.definition.tolerance_for(failed.name)
        again = compare(failed.name, produced[failed.name], truth, spec.dtype, tolerance)
        if not again.ok:
            return failed
        again.reason = (
            "within tolerance of the reference computed in float64, not of the reference in the "
            f"definition's dtype ({failed.reason})"
        )
        return again

    def changed_input(
        self, shared: SharedSet, pristine: dict[str, Value] | None = None
    ) -> str | None:
        """Which input no output aliases differs from ``pristine`` (by default the judge's
        private copy of the set), as ``first_changed_input`` says; None when none does."""
        aliased = {spec.aliases for spec in self.job.definition.outputs.values() if spec.aliases}
        pristine = pristine if pristine is not None else shared.private
        assert pristine is not None
        pairs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for name, before in pristine.items():
            current = shared.inputs.get(name)
            if name in aliased or not isinstance(current, torch.Tensor):
                continue
            if isinstance(before, torch.Tensor):
                pairs[name] = (before, current)
        return first_changed_input(pairs)


def _batches(sets: list[SharedSet]) -> list[list[SharedSet]]:
    """``sets`` in runs of at most ``EXPECT_BATCH_BYTES`` each (a larger set alone): what one
    request to the reference takes, and what the judge draws again at once for it."""
    batches: list[list[SharedSet]] = []
    total = EXPECT_BATCH_BYTES
    for shared in sets:
        if total + shared.bytes > EXPECT_BATCH_BYTES:
            batches.append([])
            total = 0
        batches[-1].append(shared)
        total += shared.bytes
    return batches


def _expect_ok(reply: dict[str, Any]) -> None:
    expect_success(reply)
    if reply.get("ok") is not True:
        raise RuntimeError(f"the sandbox did not accept a request: {str(reply)[:200]}")
