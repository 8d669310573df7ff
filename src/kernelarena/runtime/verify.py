"""A solution's outputs checked against its definition's reference, in the process that deploys it.

A judge sees what a solution does while judged; a solution that detects the judge (its process,
its modules, its environment) passes there and is wrong elsewhere. The deployer can check what it
deploys: apply compares a solution's first call at each shape with the reference on the same
inputs (``dispatch/first_use.py``). Solutions shipped with kernelarena are trusted (which ones
is dispatch's question, ``dispatch.runtime.shipped``, as runtime/ sits below the library): their
code is the library's own, checked by its tests and on every GPU it ships traces for.

The comparison is the judge's (``kernelarena.runtime.compare``: per-output tolerances, NaN and
infinity by position); the reference is the definition's own ``run``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from kernelarena.data import Definition
from kernelarena.runtime.compare import compare, first_changed_input
from kernelarena.runtime.inputs import load_reference

_REFERENCES: dict[int, tuple[Definition, Callable[..., Any]]] = {}


def reference_of(definition: Definition) -> Callable[..., Any]:
    """The definition's ``run``, loaded once per Definition object (kept here, so its id stays
    its own)."""
    known = _REFERENCES.get(id(definition))
    if known is None:
        known = _REFERENCES[id(definition)] = (definition, load_reference(definition)["run"])
    return known[1]


def expected_outputs(definition: Definition, inputs: Sequence[Any]) -> tuple[Any, ...]:
    """Every output of the reference on ``inputs``, in definition order. Inputs that an output
    aliases are cloned first: the reference writes those, and the caller's must stay as given."""
    mutated = mutated_inputs(definition)
    given = [
        value.clone() if i in mutated and isinstance(value, torch.Tensor) else value
        for i, value in enumerate(inputs)
    ]
    with torch.no_grad():
        result = reference_of(definition)(*given)
    values = tuple(result) if isinstance(result, tuple | list) else (result,)
    if len(values) != len(definition.outputs):
        raise RuntimeError(
            f"the reference of {definition.name} returned {len(values)} values for outputs "
            f"{list(definition.outputs)}"
        )
    return values


def mismatches(
    definition: Definition, produced: Sequence[Any], expected: Sequence[Any]
) -> list[str]:
    """A sentence per output that differs from the reference beyond the definition's
    tolerance for it (the judge's comparison); none when every output agrees. Outputs equal to
    the reference, or within tolerance everywhere by one check in their own precision, pass
    without it: the judge's comparison (float64, NaN and infinity by position, a report of
    where) costs about a millisecond for 7000 values on a 2-core VM, ten times the check."""
    if len(produced) != len(expected):
        return [f"{len(produced)} outputs where the definition has {len(expected)}"]
    found = []
    for (name, spec), got, want in zip(definition.outputs.items(), produced, expected, strict=True):
        if not isinstance(got, torch.Tensor):
            found.append(f"{name}: a {type(got).__name__}, not a tensor")
            continue
        tolerance = definition.tolerance_for(name)
        if _close_everywhere(got, want, tolerance.atol, tolerance.rtol):
            continue
        result = compare(name, got, want, spec.dtype, tolerance)
        if not result.ok:
            found.append(result.describe())
    return found


_PLAIN_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _close_everywhere(got: torch.Tensor, want: Any, atol: float, rtol: float) -> bool:
    """Bit-equal, or every element finite and within ``atol + rtol * |want|``: what the judge's
    comparison passes too (a NaN or an infinity anywhere leaves the question to it). Only for
    plain floating dtypes of equal shape (packed formats unpack first: the judge's comparison)."""
    if not isinstance(want, torch.Tensor) or got.dtype != want.dtype or got.shape != want.shape:
        return False
    if got.dtype not in _PLAIN_FLOATS:
        return False
    if torch.equal(got, want):
        return True
    if got.dtype in (torch.float16, torch.bfloat16):
        got, want = got.float(), want.float()
    return bool(((got - want).abs() <= atol + rtol * want.abs()).all())


def changed_input(definition: Definition, given: Sequence[Any], tried: Sequence[Any]) -> str | None:
    """The judge's sentence for the first input that no output aliases and that differs between
    ``given`` (the caller's) and ``tried`` (the copies a solution ran on); None when none does."""
    written = mutated_inputs(definition)
    pairs = {
        name: (given[i], tried[i])
        for i, name in enumerate(definition.inputs)
        if i not in written and isinstance(given[i], torch.Tensor) and tried[i] is not given[i]
    }
    return first_changed_input(pairs) if pairs else None


def mutated_inputs(definition: Definition) -> set[int]:
    """Positions of the inputs that an output aliases (in-place operators write them)."""
    names = list(definition.inputs)
    return {names.index(s.aliases) for s in definition.outputs.values() if s.aliases is not None}


def same_layout(tensor: torch.Tensor, copy: bool = True) -> torch.Tensor:
    """A new tensor with ``tensor``'s sizes, strides, dtype and device (a Triton kernel
    specializes on strides: a contiguous clone of a strided input would compile another one),
    holding its values when ``copy``. Overlapping strides (an expanded tensor) cannot be written
    element by element: those get a contiguous clone."""
    made = torch.empty_strided(
        tensor.size(), tensor.stride(), dtype=tensor.dtype, device=tensor.device
    )
    if not copy:
        return made
    try:
        return made.copy_(tensor)
    except RuntimeError:
        return tensor.clone()
