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
from kernelarena.evaluate.inputs import to_float64


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
    inf_e = torch.isinf(e)
    finite = torch.isfinite(a) & torch.isfinite(e)
    difference = torch.where(finite, (a - e).abs(), torch.zeros_like(a))
    within = difference <= tolerance.atol + tolerance.rtol * e.abs()
    positional = (nan_a != nan_e) | (inf_e & (a != e)) | (torch.isinf(a) & ~inf_e)
    good = (within & finite) | (nan_a & nan_e) | (inf_e & (a == e))
    mismatched = ~good
    max_abs = float(difference.max()) if total else 0.0
    meaningful = finite & (e.abs() > max(tolerance.atol, 1e-30))
    relative = torch.where(meaningful, difference / e.abs().clamp_min(1e-30), torch.zeros_like(a))
    max_rel = float(relative.max())
    if bool(positional.any()):
        max_abs = (
            float("inf")
            if bool((torch.isinf(a) & ~inf_e).any() | (nan_a & ~nan_e).any())
            else max_abs
        )
    count = int(mismatched.sum())
    matched_ratio = 1 - count / total
    ok = not bool(positional.any()) and matched_ratio >= tolerance.required_matched_ratio
    result = Comparison(name, ok, max_abs, max_rel, count, total)
    if not ok:
        if bool(positional.any()):
            result.reason = "NaN or infinity where the reference has none (or the reverse)"
            where = positional
        else:
            needed = tolerance.required_matched_ratio
            result.reason = f"matched {matched_ratio:.4%} of elements, needs {needed:.4%} within atol={tolerance.atol:g} rtol={tolerance.rtol:g}"
            where = mismatched
        for index in where.nonzero()[:5].tolist():
            result.first_mismatches.append(
                {
                    "index": tuple(index),
                    "got": float(a[tuple(index)]),
                    "expected": float(e[tuple(index)]),
                }
            )
    return result


def inputs_unchanged(name: str, before: torch.Tensor, after: torch.Tensor) -> str | None:
    """None when ``after`` holds the same bits as ``before``; else a sentence saying where."""
    if before.shape != after.shape:
        return f"input '{name}' changed shape from {tuple(before.shape)} to {tuple(after.shape)}"
    same = (
        before.view(torch.uint8) == after.view(torch.uint8)
        if before.dtype.itemsize == 1
        else _bits_equal(before, after)
    )
    if bool(same.all()):
        return None
    changed = (~same).nonzero()[:3].tolist()
    return f"input '{name}' was modified by the solution (first changed elements at {changed})"


def _bits_equal(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    integer = {2: torch.int16, 4: torch.int32, 8: torch.int64}[before.dtype.itemsize]
    if before.is_contiguous() and after.is_contiguous():
        return before.view(integer) == after.view(integer)
    return before.contiguous().view(integer) == after.contiguous().view(integer)
