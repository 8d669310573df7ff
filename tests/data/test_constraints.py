"""Constraints as FlashInfer-Trace writes them: shapes and values of tensors, read safely, sorted into
the ones checked with the axes and the ones the input generator has to meet."""

from __future__ import annotations

import pytest
import torch

from kernelarena.data import AxisConst, AxisError, AxisVar, Definition, TensorSpec
from kernelarena.data.constraints import plan_values
from kernelarena.data.expressions import ExpressionError, evaluate, uses

REFERENCE = "def run(q, kv_indptr, kv_indices, sm_scale):\n    return q\n"


def _paged(constraints: list[str], **extra_inputs: TensorSpec) -> Definition:
    """A paged-decode shaped definition with the given constraints."""
    return Definition(
        name="paged",
        op_type="gqa_paged",
        axes={
            "batch_size": AxisVar(),
            "len_indptr": AxisVar(),
            "num_kv_indices": AxisVar(),
            "num_pages": AxisVar(),
            "page_size": AxisConst(value=16),
        },
        inputs={
            "q": TensorSpec(shape=["batch_size", "page_size"], dtype="bfloat16"),
            "kv_indptr": TensorSpec(shape=["len_indptr"], dtype="int32"),
            "kv_indices": TensorSpec(shape=["num_kv_indices"], dtype="int32"),
            "sm_scale": TensorSpec(shape=None, dtype="float32"),
            **extra_inputs,
        },
        outputs={"out": TensorSpec(shape=["batch_size", "page_size"], dtype="bfloat16")},
        reference=REFERENCE,
        constraints=constraints,
    )


def test_expressions_read_shapes_subscripts_and_items() -> None:
    indptr = torch.tensor([0, 2, 2, 7], dtype=torch.int32)
    variables = {"kv_indptr": indptr, "x": torch.zeros(3, 5), "n": 7}
    assert evaluate("n == kv_indptr[-1].item()", variables) is True
    assert evaluate("x.shape[-1] == 5 and x.ndim == 2 and len(x) == 3", variables) is True
    assert evaluate("(kv_indptr[1:] >= kv_indptr[:-1]).all().item()", variables) is True
    assert evaluate("kv_indptr.max().item() - kv_indptr.min().item()", variables) == 7
    assert evaluate("x.size(1) * x.numel()", variables) == 75


@pytest.mark.parametrize(
    ("expression", "phrase"),
    [
        ("x.__class__", "attribute '__class__' is not allowed"),
        ("x.cpu()", "may be called"),
        ("x.item", "must be called"),
        ("x.shape.__len__()", "may be called"),
        ("max(x, key=1)", "keyword is not allowed"),
        ("(lambda: 1)()", "may be called"),
        ("__import__('os')", "unknown function"),
        ("[n for n in x]", "is not allowed"),
        ("x[7].item()", "IndexError"),
        ("n // 0", "ZeroDivisionError"),
    ],
)
def test_expressions_refuse_everything_else(expression: str, phrase: str) -> None:
    with pytest.raises(ExpressionError, match=phrase.replace("(", r"\(").replace(")", r"\)")):
        evaluate(expression, {"x": torch.zeros(3), "n": 1})


def test_uses_tell_shape_reads_from_value_reads() -> None:
    kinds = {(u.name, u.kind, u.index) for u in uses("s.shape[-1] == topk and t[-1].item() > n")}
    assert kinds == {
        ("s", "shape", -1),
        ("topk", "number", None),
        ("t", "values", None),
        ("n", "number", None),
    }


def test_published_forms_load_and_split_into_static_and_value_constraints() -> None:
    definition = _paged(
        [
            "len_indptr == batch_size + 1",
            "q.shape[1] == page_size",
            "num_kv_indices == kv_indptr[-1].item()",
        ]
    )
    assert definition.static_constraints == [
        "len_indptr == batch_size + 1",
        "q.shape[1] == page_size",
    ]
    assert definition.value_plan.checks == ["num_kv_indices == kv_indptr[-1].item()"]
    axes = definition.resolve_axes(
        {"batch_size": 3, "len_indptr": 4, "num_kv_indices": 5, "num_pages": 9}
    )
    assert axes["page_size"] == 16
    with pytest.raises(AxisError, match="'len_indptr == batch_size \\+ 1' does not hold"):
        definition.resolve_axes(
            {"batch_size": 3, "len_indptr": 5, "num_kv_indices": 5, "num_pages": 9}
        )


def test_a_shape_constraint_that_fails_names_the_shapes() -> None:
    definition = _paged(["kv_indices.shape[0] == 2 * num_pages"])
    with pytest.raises(AxisError, match=r"'kv_indices': \(5,\), 'num_pages': 9"):
        definition.resolve_axes(
            {"batch_size": 3, "len_indptr": 4, "num_kv_indices": 5, "num_pages": 9}
        )


@pytest.mark.parametrize(
    ("constraint", "phrase"),
    [
        ("kv_indptr[-1].item() == total", "names ['total'], neither axes nor inputs nor outputs"),
        ("sm_scale.shape[0] == 1", "'sm_scale' is a scalar: it has no shape"),
        (
            "kv_indices.shape[1] == 1",
            "has 1 dimensions ['num_kv_indices'], so shape[1] is out of range",
        ),
        ("out[0, 0].item() == 0", "output 'out' has no values before a solution runs"),
        ("num_pages.shape[0] == 1", "'num_pages' is an axis, a number"),
        ("kv_indptr.cpu()[-1] == 1", "may be called"),
    ],
)
def test_bad_constraints_are_refused_naming_the_field(constraint: str, phrase: str) -> None:
    with pytest.raises(ValueError) as raised:
        _paged(["len_indptr == batch_size + 1", constraint])
    assert "constraints[1]: " in str(raised.value)
    assert phrase in str(raised.value)


def test_the_plan_finds_offsets_and_bounds_in_every_written_form() -> None:
    inputs = {
        "t": TensorSpec(shape=["n"], dtype="int32"),
        "u": TensorSpec(shape=["n"], dtype="int64"),
        "f": TensorSpec(shape=["n"], dtype="float32"),
        "o": TensorSpec(shape=["m"], dtype="int32"),
    }
    plan = plan_values(
        [
            "m + 1 == o[-1].item()",
            "0 <= t.min().item() and t.max().item() <= n",
            "(u > 2).all()",
            "n * 2 > u.max()",
            "(f < 1.5).all().item()",
            "t.min().item() < 3",
        ],
        {"n", "m"},
        inputs,
    )
    assert plan.offsets["o"].total == "m + 1"
    bounds = {name: (b.low, b.high) for name, b in plan.bounds.items()}
    assert bounds == {"t": ("0", "(n) + 1"), "u": ("(2) + 1", "n * 2"), "f": (None, "1.5")}
    assert plan.unmet == ["t.min().item() < 3"]


def test_conventions_bound_published_names_unless_a_constraint_does() -> None:
    last_page = TensorSpec(shape=["batch_size"], dtype="int32")
    plan = _paged(["num_kv_indices == kv_indptr[-1].item()"], kv_last_page_len=last_page).value_plan
    assert (plan.bounds["kv_indices"].low, plan.bounds["kv_indices"].high) == ("0", "num_pages")
    assert plan.bounds["kv_indices"].distinct
    assert (plan.bounds["kv_last_page_len"].low, plan.bounds["kv_last_page_len"].high) == (
        "1",
        "page_size + 1",
    )
    explicit = _paged(["(kv_indices < 3).all()"]).value_plan.bounds["kv_indices"]
    assert (explicit.low, explicit.high, explicit.distinct) == (None, "3", False)
