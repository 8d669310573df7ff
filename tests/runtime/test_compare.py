"""The default tolerances scale their atol with the output's size: an honest float16 GEMM over a
long K is right within a scaled atol and not within a plain one; computing it from bfloat16 inputs
still fails."""

from __future__ import annotations

import torch

from kernelarena.data import DType, Tolerance
from kernelarena.data.definition import DEFAULT_TOLERANCES
from kernelarena.runtime.compare import absolute_tolerance, all_within, compare


def _gemm_outputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(exact, float16 summed in float32 along K in chunks, from bfloat16 inputs) for a
    float16 [8, 64] x [64, 14336]^T product: outputs of RMS about 120."""
    generator = torch.Generator().manual_seed(7)
    a = torch.randn(8, 14336, generator=generator).half()
    b = torch.randn(64, 14336, generator=generator).half()
    exact = a.double() @ b.double().T
    chunked = torch.zeros(8, 64, dtype=torch.float32)
    for start in range(0, 14336, 16):  # a tensor core's order: float32 partial sums of 16
        chunked += a[:, start : start + 16].float() @ b[:, start : start + 16].float().T
    lower = (a.bfloat16().double() @ b.bfloat16().double().T).half()
    return exact, chunked.half(), lower


def test_the_float16_default_scales_atol_by_the_outputs_rms() -> None:
    exact, honest, lower = _gemm_outputs()
    default = DEFAULT_TOLERANCES[DType.FLOAT16]
    scale = float(absolute_tolerance(exact, default)) / default.atol
    assert 100 < scale < 140, scale
    near_zero = exact.abs().argmin()
    shifted = honest.clone()
    shifted.view(-1)[near_zero] += 2e-3  # an honest error near zero, twice the plain atol
    assert compare("C", shifted, exact, DType.FLOAT16, default).ok
    plain = Tolerance(atol=1e-3, rtol=1e-3)
    failed = compare("C", shifted, exact, DType.FLOAT16, plain)
    assert not failed.ok and "scaled" not in failed.reason
    from_bfloat16 = compare("C", lower, exact, DType.FLOAT16, default)
    assert not from_bfloat16.ok, from_bfloat16.describe()
    assert "scaled to" in from_bfloat16.reason


def test_outputs_of_unit_scale_keep_the_plain_atol() -> None:
    expected = torch.randn(4096, generator=torch.Generator().manual_seed(1)).double() * 0.5
    default = DEFAULT_TOLERANCES[DType.FLOAT32]
    assert float(absolute_tolerance(expected, default)) == default.atol
    with_nan = expected.clone()
    with_nan[0] = float("nan")
    assert float(absolute_tolerance(with_nan, default)) == default.atol


def test_the_shortcut_passes_only_what_the_full_comparison_passes() -> None:
    """``all_within`` (float32, one answer, no statistics) is true only where ``compare`` passes:
    on random outputs at and around the tolerance's edge, in each dtype it takes, and never for
    a NaN, an infinity or an element past the tolerance."""
    generator = torch.Generator().manual_seed(3)
    for dtype, spec in (
        (torch.bfloat16, DType.BFLOAT16),
        (torch.float16, DType.FLOAT16),
        (torch.float32, DType.FLOAT32),
    ):
        tolerance = Tolerance(atol=1e-2, rtol=1e-2)
        expected = (torch.randn(64, 257, generator=generator) * 3).to(dtype)
        for scale in (0.0, 0.5, 0.99, 1.0, 1.01, 2.0):  # errors up to scale x the tolerance
            bound = tolerance.atol + tolerance.rtol * expected.double().abs()
            signs = torch.randint(0, 2, expected.shape, generator=generator) * 2 - 1
            actual = (expected.double() + signs * bound * scale).to(dtype)
            shortcut = all_within(actual, expected, tolerance)
            assert shortcut is not None
            if scale <= 0.5:  # well inside, rounding to the dtype included: the usual case
                assert bool(shortcut), (dtype, scale)
            if bool(shortcut):
                assert compare("out", actual, expected, spec, tolerance).ok, (dtype, scale)
        assert bool(all_within(expected.clone(), expected, tolerance))
        for poison in (float("nan"), float("inf")):
            wrong = expected.clone()
            wrong[3, 5] = poison
            assert not bool(all_within(wrong, expected, tolerance))
            assert not bool(all_within(expected, wrong, tolerance))  # infinity in the reference
        wrong = expected.clone()
        wrong[0, 0] += 1.0
        assert not bool(all_within(wrong, expected, tolerance))


def test_the_shortcut_declines_what_it_cannot_decide() -> None:
    tolerance = Tolerance(atol=1e-3, rtol=1e-3)
    values = torch.randn(4, 8)
    assert all_within(values.double(), values.double(), tolerance) is None  # float64
    assert all_within(values, values[:2], tolerance) is None  # shapes differ
    assert all_within(values, values, Tolerance(atol=0.0, rtol=1e-3)) is None  # atol near zero
    codes = torch.randint(0, 255, (4, 8), dtype=torch.uint8)  # packed FP4
    assert all_within(codes, codes, tolerance) is None


def test_sets_checked_stacked_pass_exactly_where_each_passes_alone() -> None:
    """The judge compares a pass's sets as one stacked tensor against a bound prepared once
    (``fast_bound``, ``within_bound``): true only where every set's own ``all_within`` is, with
    one set wrong (past the tolerance, NaN, infinite on either side) among many right ones."""
    from kernelarena.runtime.compare import fast_bound, within_bound

    generator = torch.Generator().manual_seed(5)
    tolerance = Tolerance(atol=1e-2, rtol=1e-2)
    expected = [(torch.randn(16, 33, generator=generator) * 3).to(torch.bfloat16) for _ in range(6)]
    stacked_expected, bound = fast_bound(torch.stack(expected), tolerance)
    right = [e.clone() for e in expected]
    assert bool(within_bound(torch.stack(right), stacked_expected, bound))
    for wrong_value in (None, float("nan"), float("inf")):
        actual = [e.clone() for e in expected]
        if wrong_value is None:
            actual[4][2, 7] += 1.0
        else:
            actual[4][2, 7] = wrong_value
        alone = [all_within(a, e, tolerance) for a, e in zip(actual, expected, strict=True)]
        assert [bool(v) for v in alone] == [True] * 4 + [False, True]
        assert not bool(within_bound(torch.stack(actual), stacked_expected, bound))
    infinite = [e.clone() for e in expected]
    infinite[1][0, 0] = float("inf")
    stacked_expected, bound = fast_bound(torch.stack(infinite), tolerance)
    assert not bool(within_bound(torch.stack(infinite), stacked_expected, bound))
