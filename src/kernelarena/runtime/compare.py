"""Is an output right? Per-output tolerances, NaN and infinity by position, indices of mismatches.

An element passes when ``|out - ref| <= atol + rtol * |ref|``. NaN must sit where the reference has
NaN; an infinite reference value must be matched exactly (a -inf is a valid value, a finite output
against it is wrong); an infinite output against a finite reference is wrong. Positional NaN/Inf
mismatches fail the output whatever ``required_matched_ratio`` allows for finite values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from kernelarena.data import DType, Tolerance
from kernelarena.runtime.inputs import to_float64


@dataclass
class Comparison:
    name: str
    ok: bool
    max_absolute_error: float = 0.0
    max_relative_error: float = 0.0
    mismatched: int = 0
    total: int = 0
    first_mismatches: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""

    def describe(self) -> str:
        if self.ok:
            return f"{self.name}: ok (max abs {self.max_absolute_error:.3g}, max rel {self.max_relative_error:.3g})"
        shown = ", ".join(
            f"{m['index']}: got {m['got']:.6g} expected {m['expected']:.6g}"
            for m in self.first_mismatches
        )
        return (
            f"{self.name}: {self.reason}; {self.mismatched} of {self.total} elements mismatch "
            f"(max abs {self.max_absolute_error:.3g}, max rel {self.max_relative_error:.3g}); first: {shown}"
        )


def compare(
    name: str, actual: torch.Tensor, expected: torch.Tensor, dtype: DType, tolerance: Tolerance
) -> Comparison:
    a = to_float64(actual, dtype)
    e = (
        to_float64(expected, dtype)
        if expected.dtype == actual.dtype
        else expected.to(torch.float64)
    )
    if a.shape != e.shape:
        return Comparison(
            name, False, reason=f"shape {tuple(a.shape)} but the reference has {tuple(e.shape)}"
        )
    total = a.numel()
    if total == 0:
        return Comparison(name, True)
    nan_a, nan_e = torch.isnan(a), torch.isnan(e)
    inf_a, inf_e = torch.isinf(a), torch.isinf(e)
    finite = torch.isfinite(a) & torch.isfinite(e)
    e_abs = e.abs()
    difference = torch.where(finite, (a - e).abs(), 0.0)
    atol = absolute_tolerance(e, tolerance)
    within = difference <= atol + tolerance.rtol * e_abs
    spurious_inf = inf_a & ~inf_e
    positional = (nan_a != nan_e) | (inf_e & (a != e)) | spurious_inf
    good = (within & finite) | (nan_a & nan_e) | (inf_e & (a == e))
    meaningful = finite & (e_abs > max(tolerance.atol, 1e-30))
    relative = torch.where(meaningful, difference / e_abs.clamp_min(1e-30), 0.0)
    max_abs, max_rel, any_positional, any_spurious, good_count, atol_used = _on_host(
        difference.max(),
        relative.max(),
        positional.any(),
        (spurious_inf | (nan_a & ~nan_e)).any(),  # an infinity or NaN the reference lacks
        good.sum(),
        torch.as_tensor(atol, dtype=torch.float64, device=e.device),
    )
    if any_positional:
        max_abs = float("inf") if any_spurious else max_abs
    count = total - int(good_count)
    matched_ratio = 1 - count / total
    ok = not any_positional and matched_ratio >= tolerance.required_matched_ratio
    result = Comparison(name, ok, max_abs, max_rel, count, total)
    if ok:
        return result
    if any_positional:
        result.reason = "NaN or infinity where the reference has none (or the reverse)"
        _first_mismatches(result, positional, a, e)
        return result
    needed = tolerance.required_matched_ratio
    scaled = f" (scaled to {atol_used:.3g})" if atol_used != tolerance.atol else ""
    result.reason = (
        f"matched {matched_ratio:.4%} of elements, needs {needed:.4%} within "
        f"atol={tolerance.atol:g}{scaled} rtol={tolerance.rtol:g}"
    )
    _first_mismatches(result, ~good, a, e)
    return result


def _on_host(*scalars: torch.Tensor) -> list[float]:
    """Device scalars as floats, brought to the host at once: each float() or bool() of a GPU
    tensor waits for the GPU, and there were five or six such waits per output."""
    return torch.stack([value.to(torch.float64) for value in scalars]).tolist()


# The dtypes ``all_within`` takes, each compared in float32, where its values and their difference
# are exact or rounded far inside the margin below.
_FAST_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# ``all_within`` asks this much less than the tolerance allows, so that float32 rounding (2^-24 of a
# value) can never pass an element that float64 would fail.
_FAST_MARGIN = 1 - 2**-16


def all_within(
    actual: torch.Tensor, expected: torch.Tensor, tolerance: Tolerance
) -> torch.Tensor | None:
    """A 0-d bool tensor, left on the device (no wait for the GPU), that is true only where
    ``compare`` would pass ``actual``: every element finite on both sides and within a tolerance a
    hair tighter than the plain one (no RMS scaling). False says nothing: run ``compare``. None
    where this shortcut does not apply (other dtypes, shapes or devices, or an ``atol`` so small
    that float32 would round the bound near zero).

    A pass of checked calls only needs to know that its outputs are right, and the full
    ``compare`` (float64, NaN and infinity by position, the statistics) cost 7 ms an output at
    rows=65536 x 4096 on an H100, after every batch of the judge's clocks; this is a few float32
    passes over the two tensors."""
    if not fast_checkable(actual, expected, tolerance):
        return None
    return within_bound(actual, *fast_bound(expected, tolerance))


def fast_checkable(actual: torch.Tensor, expected: torch.Tensor, tolerance: Tolerance) -> bool:
    """Whether ``all_within`` can answer for these tensors and this tolerance."""
    return not (
        actual.dtype not in _FAST_DTYPES
        or expected.dtype not in _FAST_DTYPES
        or actual.shape != expected.shape
        or actual.device != expected.device
        or actual.numel() == 0
        or tolerance.atol < 1e-30
    )


def fast_bound(expected: torch.Tensor, tolerance: Tolerance) -> tuple[torch.Tensor, torch.Tensor]:
    """``expected`` in float32 and each element's bound on the difference (``all_within``), which
    depend on the reference alone: the judge prepares them once for many checks. Where the
    reference is not finite the bound is -1, which no difference meets."""
    e = expected.to(torch.float32)
    bound = e.abs().mul_(tolerance.rtol * _FAST_MARGIN).add_(tolerance.atol * _FAST_MARGIN)
    return e, bound.masked_fill_(~torch.isfinite(bound), -1.0)


def within_bound(actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """``all_within`` against a prepared reference and bound (``fast_bound``). NaN in ``actual``
    fails: NaN is within no bound."""
    return ((actual.to(torch.float32) - expected).abs_() <= bound).all()


def _first_mismatches(
    result: Comparison, where: torch.Tensor, actual: torch.Tensor, expected: torch.Tensor
) -> None:
    for index in where.nonzero()[:5].tolist():
        at = tuple(index)
        result.first_mismatches.append(
            {"index": at, "got": float(actual[at]), "expected": float(expected[at])}
        )


def absolute_tolerance(expected: torch.Tensor, tolerance: Tolerance) -> torch.Tensor | float:
    """``atol``, times the RMS of ``expected``'s finite values where ``atol_scaled`` and that RMS
    is above 1 (a tensor on ``expected``'s device: no wait for the GPU)."""
    if not tolerance.atol_scaled or expected.numel() == 0:
        return tolerance.atol
    finite = torch.isfinite(expected)
    squares = torch.where(finite, expected, 0.0).square().sum()
    rms = (squares / finite.sum().clamp_min(1)).sqrt()
    return tolerance.atol * rms.clamp_min(1.0)


def inputs_unchanged(name: str, before: torch.Tensor, after: torch.Tensor) -> str | None:
    """None when ``after`` holds the same bits as ``before``; else a sentence saying where."""
    return first_changed_input({name: (before, after)})


def first_changed_input(pairs: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> str | None:
    """``inputs_unchanged`` over several inputs, in order: the sentence for the first that changed,
    or None. One wait for the GPU for them all, not one per input."""
    same: dict[str, torch.Tensor] = {}
    for name, (before, after) in pairs.items():
        if before.shape == after.shape:
            same[name] = (
                before.view(torch.uint8) == after.view(torch.uint8)
                if before.dtype.itemsize == 1
                else _bits_equal(before, after)
            )
    flags = torch.stack([s.all() for s in same.values()]).tolist() if same else []
    unchanged = dict(zip(same, flags, strict=True))
    for name, (before, after) in pairs.items():
        if name not in same:
            return (
                f"input '{name}' changed shape from {tuple(before.shape)} to {tuple(after.shape)}"
            )
        if not unchanged[name]:
            changed = (~same[name]).nonzero()[:3].tolist()
            return (
                f"input '{name}' was modified by the solution (first changed elements at {changed})"
            )
    return None


def _bits_equal(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    integer = {2: torch.int16, 4: torch.int32, 8: torch.int64}[before.dtype.itemsize]
    if before.is_contiguous() and after.is_contiguous():
        return before.view(integer) == after.view(integer)
    return before.contiguous().view(integer) == after.contiguous().view(integer)
