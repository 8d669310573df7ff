"""What the judge checks a set's outputs against: the reference's outputs for the inputs the set
holds (asked of the reference for many sets at once), and the comparisons with them, the cheap
stacked float32 check first (``SetChecks.all_right``), the full one where it cannot say. A mixin of
``shared_sets.SetMaker``, which makes, shares and refills the sets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from kernelarena.data import Definition
from kernelarena.evaluate.judge.request_runs import in_runs
from kernelarena.evaluate.judge.stage_clock import staged
from kernelarena.evaluate.sandbox.error_ratio import ErrorRatio, ratios
from kernelarena.runtime.compare import (
    Comparison,
    compare,
    fast_bound,
    fast_checkable,
    first_changed_input,
    within_bound,
)
from kernelarena.runtime.inputs import STANDARD, Distribution, Value

if TYPE_CHECKING:
    from kernelarena.evaluate.judge.shared_sets import CheckedJob, SharedSet

# ``SetMaker.all_right`` stacks the outputs of up to this many bytes of sets (in float32) into one
# comparison; and keeps the stacked references and bounds of this many groups of sets.
STACKED_CHECK_BYTES = 256 << 20
KEPT_BOUNDS = 4


def in_place(definition: Definition) -> bool:
    """Whether an output of ``definition`` is one of its inputs, written in place."""
    return any(spec.aliases for spec in definition.outputs.values())


class SetChecks:
    """The sets' references and comparisons; ``SetMaker`` sets ``job``, ``device`` and
    ``_bounds``."""

    job: CheckedJob
    device: torch.device
    # Stacked references and bounds by output name and reference tensors (``all_right``).
    _bounds: dict[tuple[Any, ...], tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]]

    @staged("draw")
    def draw(self, seed: int, distribution: Distribution = STANDARD) -> dict[str, Value]:
        return self.job.reference.draw(self.job, self.device, seed, distribution)

    @staged("draw")
    def draw_many(
        self, seeds: list[int], distribution: Distribution = STANDARD
    ) -> list[dict[str, Value]]:
        return self.job.reference.draw_many(self.job, self.device, seeds, distribution)

    def given(self, shared: SharedSet) -> dict[str, Value]:
        """The inputs the set was given: the judge's private copy, or where it keeps none, a
        fresh draw of its seed (``pristine``)."""
        return shared.private if shared.private is not None else self.pristine(shared)

    def pristine(self, shared: SharedSet) -> dict[str, Value]:
        """What the set was given, drawn again from its seed (for sets that keep no copy)."""
        return self.draw(shared.seed, shared.distribution)

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
            for batch in in_runs(wanted, lambda shared: shared.bytes):
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
        outputs = [self.produced(s) for s in checked]
        verdicts = []
        for name in definition.outputs:
            tolerance = definition.tolerance_for(name)
            produced = [output[name] for output in outputs]
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
