"""compare and the input check wait for the device once per call, and report what they reported
when every scalar was its own wait: checked against that implementation, kept here as the oracle."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import pytest
import torch

from kernelarena.data import DType, Tolerance
from kernelarena.evaluate.compare import (
    Comparison,
    compare,
    first_changed_input,
    inputs_unchanged,
)
from kernelarena.evaluate.inputs import to_float64


def _compare_one_wait_per_scalar(
    name: str, actual: torch.Tensor, expected: torch.Tensor, dtype: DType, tolerance: Tolerance
) -> Comparison:
    """compare as it was before its scalars shared one transfer (2026-11), verbatim."""
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


def _same(left: Comparison, right: Comparison) -> bool:
    """Field by field, NaN equal to NaN (a max over an all-NaN output is NaN in both)."""

    def normal(value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):
            return "nan"
        if isinstance(value, dict):
            return {k: normal(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [normal(v) for v in value]
        return value

    return bool(normal(asdict(left)) == normal(asdict(right)))


def _cases(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(actual, expected) pairs: exact, slightly off, far off in a few places, NaN and infinities
    in either at random, all-NaN, -0.0, one element, scalars, two dimensions."""
    generator = torch.Generator().manual_seed(seed)
    expected = torch.randn(257, generator=generator)
    noise = torch.randn(257, generator=generator)
    cases = [(expected.clone(), expected), (expected + 1e-6 * noise, expected)]
    off = expected.clone()
    off[torch.randint(0, 257, (7,), generator=generator)] += 3.0
    cases.append((off, expected))
    specials = torch.tensor([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e30])
    for _ in range(6):
        a, e = expected.clone(), expected.clone()
        for target in (a, e):
            where = torch.randint(0, 257, (5,), generator=generator)
            target[where] = specials[torch.randint(0, 6, (5,), generator=generator)]
        cases += [(a, e), (e.clone(), e)]
    cases.append((torch.full((9,), math.nan), torch.full((9,), math.nan)))
    cases.append((torch.full((9,), math.nan), torch.ones(9)))
    cases.append((torch.tensor([2.0]), torch.tensor([2.5])))
    cases.append((torch.tensor(1.0), torch.tensor(1.0)))
    cases.append((torch.tensor(1.0), torch.tensor(-1.0)))
    cases.append((off.reshape(1, 257), expected.reshape(1, 257)))
    cases.append((torch.empty(0, 3), torch.empty(0, 3)))
    cases.append((expected[:256].reshape(16, 16), expected[:256].reshape(16, 16).t()))
    return cases


TOLERANCES = [
    Tolerance(atol=1e-5, rtol=1e-5),
    Tolerance(atol=0.0, rtol=0.0),
    Tolerance(atol=0.1, rtol=0.0, required_matched_ratio=0.95),
    Tolerance(atol=1e-2, rtol=1e-2, required_matched_ratio=0.999),
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float8_e4m3fn", "int32"])
def test_compare_reports_what_it_did_with_a_wait_per_scalar(dtype: str) -> None:
    for seed in range(3):
        for actual, expected in _cases(seed):
            for tolerance in TOLERANCES:
                got = actual.to(DType(dtype).to_torch())
                for reference in (expected.to(got.dtype), expected):  # same dtype, and float32
                    now = compare("out", got, reference, DType(dtype), tolerance)
                    before = _compare_one_wait_per_scalar(
                        "out", got, reference, DType(dtype), tolerance
                    )
                    assert _same(now, before), (now, before)
                    assert now.describe() == before.describe()


def test_compare_of_fp4_and_a_shape_mismatch_as_before() -> None:
    raw = torch.randint(
        0, 256, (64,), dtype=torch.uint8, generator=torch.Generator().manual_seed(1)
    )
    actual = raw.view(torch.float4_e2m1fn_x2)
    expected = raw.clone()
    expected[3] ^= 0x11
    expected_fp4 = expected.view(torch.float4_e2m1fn_x2)
    tolerance = Tolerance(atol=0.0, rtol=0.0)
    for pair in ((actual, expected_fp4), (actual, actual.clone()), (actual[:8], actual)):
        now = compare("out", *pair, DType.FLOAT4_E2M1, tolerance)
        before = _compare_one_wait_per_scalar("out", *pair, DType.FLOAT4_E2M1, tolerance)
        assert _same(now, before), (now, before)


class _HostReads:
    """Counts the calls that bring a tensor's value to the host (on a GPU, each waits for it)."""

    NAMES = ("__bool__", "__float__", "__int__", "item", "tolist")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        for name in self.NAMES:
            original = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._counting(original))

    def _counting(self, original: Any) -> Any:
        def counted(tensor: torch.Tensor, *args: Any) -> Any:
            self.count += 1
            return original(tensor, *args)

        return counted


def test_a_passing_compare_reads_the_device_once(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = torch.randn(1000).to(torch.bfloat16)
    actual = expected.clone()
    actual[5] = math.nan
    reads = _HostReads(monkeypatch)
    assert compare("out", expected.clone(), expected, DType.BFLOAT16, TOLERANCES[0]).ok
    assert reads.count == 1
    assert not compare("out", actual, expected, DType.BFLOAT16, TOLERANCES[0]).ok
    assert reads.count > 2  # the failure path reads the mismatching elements too


def test_the_input_check_reads_the_device_once_and_names_the_first_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = torch.randn(10, dtype=torch.bfloat16)
    w = torch.randn(4, dtype=torch.float32)
    codes = torch.randint(0, 255, (6,), dtype=torch.uint8)
    pairs = {"x": (x, x.clone()), "w": (w, w.clone()), "codes": (codes, codes.clone())}
    reads = _HostReads(monkeypatch)
    assert first_changed_input(pairs) is None
    assert reads.count == 1
    assert first_changed_input({}) is None
    changed_w = w.clone()
    changed_w.view(torch.int32)[2] ^= 1
    changed_codes = codes.clone()
    changed_codes[1] ^= 4
    pairs = {"x": (x, x.clone()), "w": (w, changed_w), "codes": (codes, changed_codes)}
    message = first_changed_input(pairs)
    assert message == inputs_unchanged("w", w, changed_w)
    assert message == "input 'w' was modified by the solution (first changed elements at [[2]])"
    reshaped = {"x": (x, x.clone().reshape(2, 5)), "w": (w, changed_w)}
    assert first_changed_input(reshaped) == "input 'x' changed shape from (10,) to (2, 5)"
    assert first_changed_input({"w": (w, changed_w), "x": reshaped["x"]}) == message


def test_the_judges_warm_up_runs_the_checks_it_warms() -> None:
    """The judge's start-up warm-up (run in the background on a GPU, where it swallows errors) does
    real draws, poisons and compares: here it runs in the open and must not raise."""
    from kernelarena.evaluate.judge.warm_up import judge_ops_once

    judge_ops_once(torch.device("cpu"))
