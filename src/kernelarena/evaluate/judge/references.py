"""A definition's reference as the judge uses it: draw a set's inputs (``make_inputs`` shapes
them where the definition has one), the expected outputs and their float64 run, the reference's
timing.

A dataset's reference is code the judge did not write: it runs in a sandbox of its own
(``reference_sandbox.SandboxedReference``), confined as a solution's sandbox is. With
``KERNELARENA_REFERENCE_SANDBOX=0`` (a diagnosis) or ``KERNELARENA_UNCONFINED=1`` (every wall
down) it runs in the judge instead (``InJudgeReference``), with the user's rights, files and
network. Whatever goes wrong in a reference is ``ReferenceFailed``: the dataset's fault, reported
as such, never a verdict on the solution being judged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from kernelarena.data import Definition
from kernelarena.evaluate.options import where_references_run
from kernelarena.evaluate.sandbox.reference_runs import (
    ReferenceBroken,
    expected_outputs,
    precise_outputs,
    time_reference,
)
from kernelarena.evaluate.sandbox.timing import Timing
from kernelarena.runtime.inputs import (
    Distribution,
    PlainInputs,
    Value,
    check_value_constraints,
    load_reference,
    plain_inputs,
    shaped_origins,
)

if TYPE_CHECKING:
    from kernelarena.evaluate.judge.shared_sets import CheckedJob


class ReferenceFailed(Exception):
    """The definition's reference, or its ``make_inputs``, failed: the dataset's fault. ``str``
    names the definition and what happened; ``permanent`` where its code cannot load, so that
    its later jobs need not try again."""

    def __init__(self, definition: str, what: str, detail: str, permanent: bool = False):
        detail = detail.strip()
        super().__init__(
            f"the definition's reference of '{definition}' {what}"
            + (f": {detail}" if detail else "")
        )
        self.permanent = permanent


def last_line(text: str, limit: int = 300) -> str:
    """The line of a traceback that says what was raised."""
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


class Reference:
    """What the judge asks of a definition's reference, wherever it runs."""

    def __init__(self, definition: Definition) -> None:
        self.definition = definition
        self.shapes_inputs = False  # whether the reference defines make_inputs
        self.confinement = ""

    def ready(self, timeout_s: float) -> None:
        """Before each job: the reference loaded and answering, each request bounded by
        ``timeout_s``."""

    def release(self) -> None:
        """After each job: nothing of the reference runs until its next one."""

    def draw(
        self, job: CheckedJob, device: torch.device, seed: int, distribution: Distribution
    ) -> dict[str, Value]:
        """A set of the workload's inputs (``runtime.inputs.generate_inputs``, with the
        reference's ``make_inputs`` run where it runs)."""
        return self.draw_many(job, device, [seed], distribution)[0]

    def draw_many(
        self, job: CheckedJob, device: torch.device, seeds: list[int], distribution: Distribution
    ) -> list[dict[str, Value]]:
        """``draw`` for each of ``seeds``, with as few requests to ``make_inputs`` as it takes
        where it runs elsewhere (a timing's rotated sets come by the dozen)."""
        definition = job.definition
        drawn = [
            plain_inputs(
                definition, job.workload, job.axes, device, seed, job.blob_root, distribution
            )
            for seed in seeds
        ]
        if not self.shapes_inputs:
            for one in drawn:
                check_value_constraints(definition, job.axes, one.inputs, one.origins)
            return [one.inputs for one in drawn]
        shaped = self.shape_inputs_many(job, drawn, device)
        for one, inputs in zip(drawn, shaped, strict=True):
            origins = shaped_origins(one.origins, inputs)
            check_value_constraints(definition, job.axes, inputs, origins)
        return shaped

    def draw_ahead(self, job: CheckedJob, device: torch.device, seeds: list[int]) -> None:
        """Where draws are kept and ``make_inputs`` runs elsewhere, ``seeds`` drawn (in the
        standard distribution) in as few requests as it takes, for the ``draw`` of each that
        follows to find kept; elsewhere nothing."""

    def shape_inputs_many(
        self, job: CheckedJob, drawn: list[PlainInputs], device: torch.device
    ) -> list[dict[str, Value]]:
        """``make_inputs`` on each of ``drawn``."""
        return [self.shape_inputs(job, one, device) for one in drawn]

    def shape_inputs(
        self, job: CheckedJob, drawn: PlainInputs, device: torch.device
    ) -> dict[str, Value]:
        raise NotImplementedError

    def outputs(
        self,
        job: CheckedJob,
        inputs: dict[str, Value],
        expected: bool = True,
        precise: bool = False,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The reference's outputs for ``inputs`` (where ``expected``; else empty) and those of its
        run on them upcast to float64 (where ``precise``; empty where it cannot run so)."""
        return self.outputs_many(job, [inputs], expected, precise)[0]

    def outputs_many(
        self,
        job: CheckedJob,
        draws: list[dict[str, Value]],
        expected: bool = True,
        precise: bool = False,
    ) -> list[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]]:
        """``outputs`` for each of ``draws``, as few requests as it takes where the reference
        runs elsewhere."""
        raise NotImplementedError

    def time(
        self, job: CheckedJob, device: torch.device, draws: list[dict[str, Value]], graph: bool
    ) -> Timing:
        """The reference timed over ``draws`` as its solution was (``reference_runs``)."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _failed(self, what: str, detail: str = "", permanent: bool = False) -> ReferenceFailed:
        return ReferenceFailed(self.definition.name, what, detail, permanent)


class InJudgeReference(Reference):
    """The reference run in the judge's own process: no walls at all
    (``options.REFERENCES_UNCONFINED``)."""

    def __init__(self, definition: Definition) -> None:
        super().__init__(definition)
        try:
            namespace = load_reference(definition)
        except Exception as error:
            raise self._failed("does not load", f"{type(error).__name__}: {error}", True) from None
        run: Any = namespace.get("run")
        self.hook = namespace.get("make_inputs")
        if not callable(run):
            raise self._failed("is broken", "it defines no function run", True)
        self.run: Callable[..., Any] = run
        self.shapes_inputs = callable(self.hook)
        self.confinement = "not confined: " + where_references_run()

    def shape_inputs(
        self, job: CheckedJob, drawn: PlainInputs, device: torch.device
    ) -> dict[str, Value]:
        params = dict(job.workload.params or {})
        try:
            made = self.hook(dict(job.axes), drawn.inputs, params, drawn.generator, device)  # type: ignore[misc]
            return dict(made)
        except Exception as error:
            raise self._failed(
                "raised in make_inputs", f"{type(error).__name__}: {error}"
            ) from None

    def outputs_many(
        self,
        job: CheckedJob,
        draws: list[dict[str, Value]],
        expected: bool = True,
        precise: bool = False,
    ) -> list[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]]:
        return [self._outputs(inputs, expected, precise) for inputs in draws]

    def _outputs(
        self, inputs: dict[str, Value], expected: bool, precise: bool
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        arguments = [inputs[name] for name in self.definition.inputs]
        found: dict[str, torch.Tensor] = {}
        if expected:
            try:
                values = expected_outputs(self.run, self.definition, arguments)
            except ReferenceBroken as broken:
                raise self._failed("is broken", str(broken)) from None
            except Exception as error:
                raise self._failed("raised", f"{type(error).__name__}: {error}") from None
            found = dict(zip(self.definition.outputs, values, strict=True))
        upcast = precise_outputs(self.run, self.definition, inputs) if precise else {}
        return found, upcast

    def time(
        self, job: CheckedJob, device: torch.device, draws: list[dict[str, Value]], graph: bool
    ) -> Timing:
        arguments = [[d[name] for name in self.definition.inputs] for d in draws]
        options: dict[str, Any] = asdict(job.options)
        try:
            return time_reference(self.run, device, arguments, graph, options)
        except Exception as error:
            raise self._failed("raised while timed", f"{type(error).__name__}: {error}") from None
