"""Seeded inputs for every dtype (FP8/FP4 over every code), poisoned outputs, and comparisons."""

from __future__ import annotations

import math

import pytest
import torch

from kernelarena.data import (
    AxisVar,
    Definition,
    DType,
    RandomInput,
    TensorSpec,
    Tolerance,
    Workload,
)
from kernelarena.evaluate.compare import compare, inputs_unchanged
from kernelarena.evaluate.inputs import allocate_outputs, generate_inputs, to_float64

ALL_DTYPES = [d.value for d in DType]


def _definition(dtype: str) -> Definition:
    return Definition(
        name=f"identity_{dtype}",
        op_type="test",
        axes={"n": AxisVar()},
        inputs={"x": TensorSpec(shape=["n"], dtype=dtype)},
        outputs={"y": TensorSpec(shape=["n"], dtype=dtype)},
        reference="def run(x):\n    return x.clone()\n",
    )


def _draw(dtype: str, n: int = 4096, seed: int = 0) -> torch.Tensor:
    definition = _definition(dtype)
    workload = Workload(uuid="w", axes={"n": n}, inputs={"x": RandomInput()})
    inputs = generate_inputs(definition, workload, {"n": n}, torch.device("cpu"), seed, None)
    value = inputs["x"]
    assert isinstance(value, torch.Tensor)
    return value


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_random_inputs_are_seeded_typed_and_not_zero(dtype: str) -> None:
    x = _draw(dtype)
    assert x.dtype == DType(dtype).to_torch() and x.shape == (4096,)
    assert torch.equal(
        x.view(torch.uint8), _draw(dtype).view(torch.uint8)
    )  # same seed, same tensor
    assert not torch.equal(x.view(torch.uint8), _draw(dtype, seed=1).view(torch.uint8))
    if dtype != "bool":
        assert (to_float64(x, DType(dtype)) != 0).float().mean() > 0.5


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_inputs_cover_every_finite_code(dtype: str) -> None:
    codes = set(_draw(dtype, n=100_000).view(torch.uint8).tolist())
    decoded = torch.arange(256, dtype=torch.uint8).view(DType(dtype).to_torch()).float()
    finite = {code for code in range(256) if math.isfinite(decoded[code].item())}
    assert codes == finite
    assert len(finite) >= 240


def test_fp4_inputs_cover_all_sixteen_codes_in_both_nibbles() -> None:
    raw = _draw("float4_e2m1", n=10_000).view(torch.uint8)
    assert set((raw & 0xF).tolist()) == set(range(16))
    assert set((raw >> 4).tolist()) == set(range(16))
    values = to_float64(raw.view(torch.float4_e2m1fn_x2), DType.FLOAT4_E2M1)
    assert values.shape == (20_000,)
    assert set(values.abs().tolist()) == {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0}


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_outputs_are_poisoned(dtype: str) -> None:
    definition = _definition(dtype)
    out = allocate_outputs(definition, {"n": 64}, torch.device("cpu"))["y"]
    values = to_float64(out, DType(dtype))
    if DType(dtype).is_float and dtype != "float4_e2m1":
        assert torch.isnan(values).all()
    elif dtype == "float4_e2m1":
        assert (values == -6.0).all()
    else:
        assert (values != 0).all()


def test_compare_tolerance_nan_and_infinity_by_position() -> None:
    tolerance = Tolerance(atol=1e-3, rtol=1e-3)
    expected = torch.tensor([1.0, -math.inf, math.nan, 2.0])
    assert compare("y", expected.clone(), expected, DType.FLOAT32, tolerance).ok
    finite_for_inf = torch.tensor([1.0, -1e30, math.nan, 2.0])
    result = compare("y", finite_for_inf, expected, DType.FLOAT32, tolerance)
    assert not result.ok and result.first_mismatches[0]["index"] == (1,)
    nan_where_value = torch.tensor([1.0, -math.inf, math.nan, math.nan])
    assert not compare("y", nan_where_value, expected, DType.FLOAT32, tolerance).ok
    inf_where_value = torch.tensor([math.inf, -math.inf, math.nan, 2.0])
    assert not compare("y", inf_where_value, expected, DType.FLOAT32, tolerance).ok
    slightly_off = torch.tensor([1.0005, -math.inf, math.nan, 2.0025])
    assert compare("y", slightly_off, expected, DType.FLOAT32, tolerance).ok
    off = torch.tensor([1.0, -math.inf, math.nan, 2.01])
    result = compare("y", off, expected, DType.FLOAT32, tolerance)
    assert not result.ok and result.mismatched == 1 and "2.01" in result.describe()


def test_compare_required_matched_ratio() -> None:
    expected = torch.ones(100)
    actual = expected.clone()
    actual[:3] = 5.0
    assert not compare("y", actual, expected, DType.FLOAT32, Tolerance(atol=0.1, rtol=0.0)).ok
    assert compare(
        "y",
        actual,
        expected,
        DType.FLOAT32,
        Tolerance(atol=0.1, rtol=0.0, required_matched_ratio=0.95),
    ).ok


def test_inputs_unchanged_sees_one_flipped_bit() -> None:
    before = torch.randn(10, dtype=torch.bfloat16)
    after = before.clone()
    assert inputs_unchanged("x", before, after) is None
    after.view(torch.int16)[7] ^= 1
    assert "first changed elements at [[7]]" in (inputs_unchanged("x", before, after) or "")
