"""The first call of a key: which solution runs there, tried before it is kept.

Outside CUDA graph capture, for each ranking apply uses at the key (eager time outside capture and
GPU time inside, both where they pick differently: ``runtime.rank_by``), the table's choice is
taken in order, skipping solutions dropped in this process and those that do not build here. A
solution is tried on the call's own inputs before it is kept, where it needs one of two things;
a try writes only tensors of its own: new outputs, and copies (same sizes, strides and values) of
the inputs it may write (``trial_arguments``):

- a check: a solution kernelarena does not ship (``runtime.needs_check``) is compared with the
  definition's reference on those inputs (it gets copies of every input: it must not write where
  it may not, and could). A mismatch, or an exception, drops it for the process (``runtime.drop``:
  every call site forgets what it prepared, so no key keeps it) and the next of the choice is
  tried, then the fallback. The caller's tensors are never handed to it untried.
- a warm-up: the winner inside graphs, where it is not the eager winner, is called once, so that
  its Triton kernels tune and compile and its buffers are allocated here and not in a capture.
  (The eager winner needs none: the call itself, outside any capture, warms it.)

With ``verify_every``, a checked solution's calls are compared again every that many calls
outside capture; a mismatch drops it as above and the call returns the next choice's result.

Inside a capture, a key never resolved gets what can run there without building, tuning, loading a
table or reading results back (``capture_choice``): a solution already tried at this key by another
call site, else the fallback, with a warning naming the key. Nothing is stored, so the next eager
call of the key resolves it properly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from kernelarena.compile import Runnable
from kernelarena.data import Definition
from kernelarena.dispatch import calls
from kernelarena.dispatch.calls import (
    Prepared,
    adapt,
    as_tuple,
    capture_aware,
    invoke,
    reference_solution,
    returning,
    solution_call,
)
from kernelarena.dispatch.table import Key, RankBy, shape_key
from kernelarena.runtime.verify import (
    changed_input,
    expected_outputs,
    mismatches,
    mutated_inputs,
    same_layout,
)

if TYPE_CHECKING:
    from kernelarena.dispatch.apply import CallSite
    from kernelarena.dispatch.runtime import ApplyRuntime
    from kernelarena.dispatch.signature import Binding

log = logging.getLogger("kernelarena.dispatch")


@dataclass
class FirstCall:
    """A key's first call: where it came from, its arguments, and the reference's outputs on
    them, computed when a solution first needs checking."""

    site: CallSite
    runtime: ApplyRuntime
    binding: Binding
    args: tuple[Any, ...]
    key: Key
    expected: tuple[Any, ...] | None = field(default=None, repr=False)

    def reference_outputs(self) -> tuple[Any, ...]:
        if self.expected is None:
            count = len(self.binding.definition.inputs)
            self.expected = expected_outputs(self.binding.definition, self.args[:count])
        return self.expected

    def slot(self, name: str) -> tuple[str, str, str, Key]:
        return (name, str(self.binding.device), self.binding.definition.name, self.key)

    def describe(self) -> str:
        values = {**self.binding.axes, **self.binding.flags}
        return f"{self.binding.definition.name} at {values}"


def prepare(
    site: CallSite, runtime: ApplyRuntime, binding: Binding, args: tuple[Any, ...]
) -> Prepared:
    """The callable for a key, its solutions tried (see the module's docstring). Ranked by eager
    per-call time, except inside CUDA graph capture (or with ``rank_by="gpu"``), where GPU time
    is what a call costs: where the two rankings pick different solutions, both are prepared and
    each call asks which applies."""
    first = FirstCall(
        site, runtime, binding, args, shape_key(binding.definition, binding.axes, binding.flags)
    )
    mode = runtime.rank_by
    chosen, prepared = _ranked(first, "gpu" if mode == "gpu" else "eager", warmed_by_call=True)
    capturing = calls.capture_check(binding.device) if mode == "auto" else None
    if capturing is None:
        return prepared
    chosen_in_graph, in_graph = _ranked(first, "gpu", warmed_by_call=False, eager_choice=chosen)
    if chosen_in_graph == chosen:
        return prepared
    return capture_aware(prepared, in_graph, capturing)


def _ranked(
    first: FirstCall, rank_by: RankBy, warmed_by_call: bool, eager_choice: str | None = None
) -> tuple[str | None, Prepared]:
    """The first solution of the table's choice that builds here and passes its try, with its
    callable; else (None, the fallback)."""
    runtime, binding = first.runtime, first.binding
    definition, device = binding.definition, binding.device
    table = runtime.table(definition, device, rank_by)
    choice = table.choose(first.key)
    for name in choice.solutions:
        if name in runtime.dropped:
            continue
        runnable = runtime.runnable(definition, name, device)
        if runnable is None:
            continue
        prepared = solution_call(runnable, binding)
        warm = not warmed_by_call and name != eager_choice
        if not _tried(first, runnable, prepared, warm):
            continue
        log.debug(
            "%s: %s -> %s (%s, by %s time%s)",
            first.site.label,
            first.describe(),
            name,
            choice.reason,
            rank_by,
            f", borrowed from {table.borrowed_from}" if table.borrowed_from else "",
        )
        return name, _rechecking(first, runnable, prepared)
    return None, _fallback(first)


def _tried(first: FirstCall, runnable: Runnable, prepared: Prepared, warm: bool) -> bool:
    """Whether ``runnable`` may run at this key: it was tried here before, or it needs no try,
    or its try on copies of the arguments (a check against the reference where it needs one, a
    warm-up where ``warm``) went well."""
    runtime, definition = first.runtime, first.binding.definition
    name, slot = runnable.solution.name, first.slot(runnable.solution.name)
    if slot in runtime.ready:
        return True
    check = runtime.needs_check(definition, runnable.solution)
    if check or warm:
        try:
            problems = _try(first, prepared, check)
        except Exception as error:  # a solution that fails here is not deployed here
            problems = [f"raised {type(error).__name__}: {str(error)[:300]}"]
        if problems and check:
            runtime.drop(
                name,
                f"its first call at {first.describe()} disagrees with the reference: {'; '.join(problems)}",
            )
            return False
        if problems:
            runtime.warn_once(
                f"{name} {first.key}",
                f"apply: {name} is skipped at {first.describe()}: {problems[0]}",
            )
            return False
    runtime.ready.add(slot)
    return True


def _try(first: FirstCall, prepared: Prepared, check: bool) -> list[str]:
    """One call on trial arguments; with ``check``, what differs from the reference and whether
    it wrote an input it may not (the judge's two checks), as sentences."""
    definition = first.binding.definition
    trial = trial_arguments(first.binding, first.args, check)
    produced = invoke(prepared, trial)
    if not check:
        return []
    problems = mismatches(definition, as_tuple(produced), first.reference_outputs())
    changed = changed_input(definition, first.args, trial)
    return [*problems, changed] if changed else problems


def trial_arguments(binding: Binding, args: tuple[Any, ...], copy_inputs: bool) -> tuple[Any, ...]:
    """Arguments for a try that leaves the caller's tensors as they are: outputs passed in are
    replaced by new ones of the same layout; inputs an output aliases (the solution writes them)
    by copies, and with ``copy_inputs`` every input tensor is (a solution being checked may
    write where it must not)."""
    count = len(binding.definition.inputs)
    written = mutated_inputs(binding.definition)
    trial: list[Any] = []
    for position, value in enumerate(args):
        if not isinstance(value, torch.Tensor):
            trial.append(value)
        elif position >= count:
            trial.append(same_layout(value, copy=False))
        elif copy_inputs or position in written:
            trial.append(same_layout(value))
        else:
            trial.append(value)
    return tuple(trial)


def _rechecking(first: FirstCall, runnable: Runnable, prepared: Prepared) -> Prepared:
    """``prepared``, compared with the reference again every ``verify_every`` calls outside
    capture where the solution needs checks at all."""
    runtime, binding = first.runtime, first.binding
    every = runtime.verify_every
    if not every or not runtime.needs_check(binding.definition, runnable.solution):
        return prepared
    capturing = calls.capture_check(binding.device) or _never_capturing
    name, site, definition = runnable.solution.name, first.site, binding.definition
    count = [0]

    def sampled(*args: Any) -> Any:
        count[0] += 1
        if count[0] < every or capturing():
            return invoke(prepared, args)
        count[0] = 0
        return _checked_call(runtime, site, definition, name, prepared, args)

    return returning(sampled)


def _checked_call(
    runtime: ApplyRuntime,
    site: CallSite,
    definition: Definition,
    name: str,
    prepared: Prepared,
    args: tuple[Any, ...],
) -> Any:
    """One call on the caller's own arguments, compared with the reference computed first; on a
    mismatch the inputs it wrote are restored, it is dropped, and the call is made again (now
    resolving to the next choice)."""
    count = len(definition.inputs)
    expected = expected_outputs(definition, args[:count])
    written = {i: args[i].clone() for i in mutated_inputs(definition)}
    result = invoke(prepared, args)
    problems = mismatches(definition, as_tuple(result), expected)
    if not problems:
        return result
    for position, pristine in written.items():
        args[position].copy_(pristine)
    runtime.drop(
        name,
        f"a re-check (every {runtime.verify_every} calls) disagrees with the reference: {'; '.join(problems)}",
    )
    return site.dispatch(args, {})


def _never_capturing() -> bool:
    return False


def _fallback(first: FirstCall) -> Prepared:
    site, runtime, binding = first.site, first.runtime, first.binding
    if site.fallback_for is None:
        return returning(site.body)
    chosen = site.fallback_for(runtime, binding.definition, binding.device)
    if isinstance(chosen, Runnable):
        return solution_call(chosen, binding)
    return adapt(chosen, False, binding)


def capture_choice(site: CallSite, runtime: ApplyRuntime, binding: Binding) -> Prepared:
    """For a key first reached inside a CUDA graph capture: a solution already tried at this key
    (by another call site) in this process, by the graph ranking first; else the fallback (the
    decorated body; for an operator, its default solution if built already, else the reference).
    Nothing is built, tuned, read from disk or checked; a warning says so once per key."""
    definition, device = binding.definition, binding.device
    key = shape_key(definition, binding.axes, binding.flags)
    where = f"{definition.name} at { ({**binding.axes, **binding.flags}) }"
    why = "its first call is inside CUDA graph capture, where no solution may be built, tuned or checked"
    for rank_by in ("gpu", "eager"):
        table = runtime.loaded_table(definition, device, rank_by)
        for name in table.choose(key).solutions if table is not None else ():
            runnable = runtime.built(name, device)
            tried = (name, str(device), definition.name, key) in runtime.ready
            if runnable is not None and tried and name not in runtime.dropped:
                runtime.warn_once(
                    f"capture {where}",
                    f"{site.label}: {where}: {why}; running {name}, tried at this key already",
                )
                return solution_call(runnable, binding)
    prepared, what = _capture_fallback(site, runtime, binding)
    runtime.warn_once(
        f"capture {where}",
        f"{site.label}: {where}: {why}; running {what} in this capture. Call it once outside "
        "capture first (a warm-up step) to capture the measured winner.",
    )
    return prepared


def _capture_fallback(
    site: CallSite, runtime: ApplyRuntime, binding: Binding
) -> tuple[Prepared, str]:
    if site.fallback_for is None:
        return returning(site.body), "the decorated function's body"
    built = runtime.built_default(binding.definition, binding.device)
    if built is not None:
        return solution_call(built, binding), built.solution.name
    reference: Callable[..., Any] = reference_solution(binding.definition)
    return adapt(reference, False, binding), "the definition's reference"
