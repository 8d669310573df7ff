"""runtime.verify: the comparison with the reference agrees with the judge's on every kind of
output, its fast path included; the reference is loaded once."""

from __future__ import annotations

import pytest
import torch

from kernelarena.data import Definition
from kernelarena.runtime.compare import compare
from kernelarena.runtime.verify import (
    expected_outputs,
    mismatches,
    reference_of,
    same_layout,
)


def definition(dtype: str) -> Definition:
    return Definition.model_validate(
        {
            "name": f"twice_{dtype}",
            "op_type": "twice",
            "axes": {"n": {"type": "var"}},
            "inputs": {"x": {"shape": ["n"], "dtype": dtype}},
            "outputs": {"out": {"shape": ["n"], "dtype": dtype}},
            "reference": "def run(x):\n    return x * 2\n",
            "tolerances": {"out": {"atol": 1e-3, "rtol": 1e-3}},
        }
    )


def variants(want: torch.Tensor) -> dict[str, torch.Tensor]:
    """Outputs that the judge passes or fails, against ``want``."""
    nan, inf = want.clone(), want.clone()
    nan[3], inf[5] = float("nan"), float("inf")
    return {
        "equal": want.clone(),
        "within": want + 5e-4,
        "beyond": want + 0.5,
        "one off": torch.where(torch.arange(want.numel()) == 7, want + 1, want),
        "nan": nan,
        "inf": inf,
    }


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_mismatches_agree_with_the_judges_comparison(dtype: str) -> None:
    spec = definition(dtype)
    x = torch.randn(1000).to(getattr(torch, dtype))
    (want,) = expected_outputs(spec, (x,))
    wants = {"clean": want}
    nan_want, inf_want = want.clone(), want.clone()
    nan_want[3], inf_want[5] = float("nan"), float("inf")
    wants |= {"nan": nan_want, "inf": inf_want}
    tolerance = spec.tolerance_for("out")
    for reference_name, reference in wants.items():
        for label, got in variants(reference).items():
            judged = compare("out", got, reference, spec.outputs["out"].dtype, tolerance).ok
            found = mismatches(spec, (got,), (reference,))
            assert (found == []) == judged, (dtype, reference_name, label, found)


def test_the_reference_is_loaded_once_and_leaves_its_inputs_alone() -> None:
    spec = definition("float32")
    assert reference_of(spec) is reference_of(spec)
    x = torch.randn(9)
    (out,) = expected_outputs(spec, (x,))
    assert torch.equal(out, x * 2)


def test_same_layout_keeps_strides_and_values() -> None:
    rows = torch.randn(6, 16)[:, :10]  # row stride 16, not contiguous
    copy = same_layout(rows)
    assert copy.stride() == rows.stride() and torch.equal(copy, rows)
    assert copy.data_ptr() != rows.data_ptr()
    expanded = torch.randn(1, 8).expand(4, 8)  # overlapping: a contiguous clone instead
    assert torch.equal(same_layout(expanded), expanded)
