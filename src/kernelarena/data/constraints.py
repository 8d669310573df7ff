"""Constraints that read tensors: which are static, which need values, and how inputs can meet them.

FlashInfer-Trace writes constraints as Python expressions over axes and tensors. Three kinds appear in
the published definitions:

- over axes: ``len_indptr == batch_size + 1``; checked when a workload's axes are resolved;
- over shapes: ``sparse_indices.shape[-1] == topk``; a shape follows from the axes, so these are
  checked then too, against stand-ins that know only the shape (``Shape``);
- over values: ``total_q == qo_indptr[-1].item()``; only the inputs can tell, so these are checked on
  every input set the evaluator makes, and the generator has to meet them.

The generator meets two forms (``plan_values`` finds them; ``and`` splits a constraint into parts):

- offsets, ``<axes> == T[-1].item()``: T is drawn as a monotone offsets array from 0 to that total
  (FlashInfer's ``indptr`` arrays, varlen ``cu_seqlens``);
- bounds, ``T.min().item() >= <axes>``, ``T.max().item() < <axes>`` or elementwise
  ``(T < <axes>).all()`` (either side, ``<=``, ``>``; the elementwise form also holds for an empty T):
  T is drawn uniformly in the range.

FlashInfer's APIs also give some inputs a meaning the published definitions never state as a constraint
(page ids index the cache, a last page holds 1 to page_size tokens). ``CONVENTIONS`` supplies those
bounds for inputs of these names that no constraint bounds, so generated page tables stay inside their
caches; they are defaults for generation, never checks a loaded blob must pass.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from kernelarena.data._base import TensorSpec
from kernelarena.data.expressions import ExpressionError, names, parse, uses


@dataclass(frozen=True)
class Shape:
    """What a constraint sees of a tensor before there are values: its shape."""

    shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def size(self, index: int | None = None) -> int | tuple[int, ...]:
        return self.shape if index is None else self.shape[index]

    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count

    def __len__(self) -> int:
        return self.shape[0]


def constraint_problems(
    field_name: str,
    text: str,
    axes: Collection[str],
    inputs: Mapping[str, TensorSpec],
    outputs: Mapping[str, TensorSpec],
) -> list[str]:
    """What is wrong with one constraint, each message starting with ``field_name``."""
    try:
        found = uses(text)
    except ExpressionError as error:
        return [f"{field_name}: {error}"]
    problems: list[str] = []
    unknown = sorted({u.name for u in found} - set(axes) - set(inputs) - set(outputs))
    if unknown:
        problems.append(f"{field_name}: names {unknown}, neither axes nor inputs nor outputs")
    for use in found:
        spec = inputs.get(use.name) or outputs.get(use.name)
        if use.name in axes:
            if use.kind != "number":
                problems.append(
                    f"{field_name}: '{use.name}' is an axis, a number: it has no shape or values"
                )
        elif spec is None:
            continue
        elif use.name not in inputs and use.kind != "shape":
            problems.append(
                f"{field_name}: output '{use.name}' has no values before a solution runs, so "
                "a constraint may read only its shape"
            )
        elif spec.shape is None and use.kind == "shape":
            problems.append(f"{field_name}: '{use.name}' is a scalar: it has no shape")
        elif spec.shape is not None and use.index is not None:
            rank = len(spec.shape)
            if not -rank <= use.index < rank:
                problems.append(
                    f"{field_name}: '{use.name}' has {rank} dimensions {spec.shape}, so "
                    f"shape[{use.index}] is out of range"
                )
    return list(dict.fromkeys(problems))


def reads_values(text: str, axes: Collection[str]) -> bool:
    """Whether a constraint needs input values (anything beyond axes and shapes)."""
    return any(u.name not in axes and u.kind != "shape" for u in uses(text))


@dataclass(frozen=True)
class Offsets:
    """T[0] = 0 <= T[1] <= ... <= T[-1] = total: an indptr or cu_seqlens array."""

    total: str
    constraint: str


@dataclass
class Bounds:
    """Values drawn uniformly in [low, high); ``distinct`` draws without repeats where they fit."""

    low: str | None = None
    high: str | None = None
    distinct: bool = False
    sources: list[str] = field(default_factory=list)


@dataclass
class ValuePlan:
    offsets: dict[str, Offsets] = field(default_factory=dict)
    bounds: dict[str, Bounds] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)
    unmet: list[str] = field(default_factory=list)

    def generated(self, tensor: str) -> bool:
        return tensor in self.offsets or tensor in self.bounds


class Convention(NamedTuple):
    input: str
    low: str
    high: str  # exclusive
    distinct: bool = False
    floats: bool = False


# What FlashInfer's APIs mean by these input names, applied when the axes they name exist and no
# constraint bounds the input: random integers in [-100, 100) would index outside the caches. Page ids
# and state slots are distinct, as in a real cache, where they fit.
CONVENTIONS: tuple[Convention, ...] = (
    Convention("kv_indices", "0", "num_pages", distinct=True),  # page ids of the paged KV cache
    Convention("block_table", "0", "num_pages", distinct=True),  # page ids, a row per sequence
    Convention("kv_last_page_len", "1", "page_size + 1"),  # tokens held by a sequence's last page
    Convention("sparse_indices", "-1", "num_pages * page_size"),  # token slots; -1 pads
    Convention("initial_state_indices", "0", "pool_size", distinct=True),  # a state per sequence
    Convention("seq_lens", "1", "max_num_pages * page_size + 1"),  # tokens of each sequence
    Convention("top_k", "1", "vocab_size + 1"),  # tokens kept by top-k sampling
    Convention("top_p", "0.05", "1.0", floats=True),  # probability mass kept by top-p sampling
)


def plan_values(
    constraints: list[str], axes: Collection[str], inputs: Mapping[str, TensorSpec]
) -> ValuePlan:
    """Sort the value constraints into offsets and bounds to generate, and those no form meets."""
    plan = ValuePlan()
    for text in constraints:
        if not reads_values(text, axes):
            continue
        plan.checks.append(text)
        parts = _conjuncts(parse(text).body)
        if not all(_plan_part(part, text, axes, inputs, plan) for part in parts):
            plan.unmet.append(text)
    for convention in CONVENTIONS:
        spec = inputs.get(convention.input)
        if spec is None or spec.shape is None or plan.generated(convention.input):
            continue
        named = names(convention.low) | names(convention.high)
        if spec.dtype.is_float != convention.floats or not named <= set(axes):
            continue
        plan.bounds[convention.input] = Bounds(
            convention.low,
            convention.high,
            convention.distinct,
            [f"FlashInfer's convention for '{convention.input}'"],
        )
    return plan


def _conjuncts(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return [part for value in node.values for part in _conjuncts(value)]
    return [node]


def _plan_part(
    part: ast.expr,
    text: str,
    axes: Collection[str],
    inputs: Mapping[str, TensorSpec],
    plan: ValuePlan,
) -> bool:
    """Record what ``part`` asks of one tensor; False when it is no form the generator meets."""
    elementwise = _all_of(part)
    if elementwise is not None:
        part = elementwise
    if not (isinstance(part, ast.Compare) and len(part.ops) == 1):
        return False
    left, op, right = part.left, part.ops[0], part.comparators[0]
    if isinstance(op, ast.Eq):
        return elementwise is None and _plan_offsets(left, right, text, axes, inputs, plan)
    flipped = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE}
    if type(op) not in flipped:
        return False
    if _bounded_tensor(left, elementwise is not None) is None:
        left, right, op = right, left, flipped[type(op)]()
    reading = _bounded_tensor(left, elementwise is not None)
    if reading is None or not _over(right, axes) or reading[0] not in inputs:
        return False
    if inputs[reading[0]].shape is None:
        return False  # a scalar comes from the workload or is drawn plainly: nothing to shape
    tensor, which = reading  # which: 'min', 'max', or 'each' for an elementwise bound
    integers = not inputs[tensor].dtype.is_float
    limit = ast.unparse(right)
    if which in ("min", "each") and isinstance(op, ast.GtE | ast.Gt):
        bounds = plan.bounds.setdefault(tensor, Bounds())
        bounds.low = f"({limit}) + 1" if isinstance(op, ast.Gt) and integers else limit
    elif which in ("max", "each") and isinstance(op, ast.Lt | ast.LtE):
        bounds = plan.bounds.setdefault(tensor, Bounds())
        bounds.high = f"({limit}) + 1" if isinstance(op, ast.LtE) and integers else limit
    else:
        return False  # "some element is below E" bounds no draw
    bounds.sources.append(text)
    return True


def _plan_offsets(
    left: ast.expr,
    right: ast.expr,
    text: str,
    axes: Collection[str],
    inputs: Mapping[str, TensorSpec],
    plan: ValuePlan,
) -> bool:
    for last, total in ((left, right), (right, left)):
        tensor = _last_element_of(last)
        spec = inputs.get(tensor or "")
        one_dimensional_integers = (
            spec is not None
            and spec.shape is not None
            and len(spec.shape) == 1
            and not spec.dtype.is_float
        )
        if tensor and one_dimensional_integers and _over(total, axes):
            plan.offsets[tensor] = Offsets(ast.unparse(total), text)
            return True
    return False


def _all_of(node: ast.expr) -> ast.expr | None:
    """C of ``(C).all()`` or ``(C).all().item()``."""
    node = _unwrap_item(node)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "all"
        and not node.args
    ):
        return node.func.value
    return None


def _bounded_tensor(node: ast.expr, elementwise: bool) -> tuple[str, str] | None:
    """(T, 'each') of T in ``(T < E).all()``; (T, 'min' or 'max') of ``T.min().item()``."""
    if elementwise:
        return (node.id, "each") if isinstance(node, ast.Name) else None
    return _extreme_of(node)


def _over(node: ast.expr, axes: Collection[str]) -> bool:
    """Whether ``node`` is an expression over axes alone (a number once the axes are known)."""
    try:
        return all(u.name in axes and u.kind == "number" for u in uses(ast.unparse(node)))
    except ExpressionError:
        return False


def _unwrap_item(node: ast.expr) -> ast.expr:
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "item"
        and not node.args
    ):
        return node.func.value
    return node


def _last_element_of(node: ast.expr) -> str | None:
    """T of ``T[-1].item()`` or ``T[-1]``."""
    node = _unwrap_item(node)
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
        return None
    index = node.slice
    minus_one = (
        isinstance(index, ast.UnaryOp)
        and isinstance(index.op, ast.USub)
        and isinstance(index.operand, ast.Constant)
        and index.operand.value == 1
    )
    return node.value.id if minus_one else None


def _extreme_of(node: ast.expr) -> tuple[str, str] | None:
    """(T, 'min' or 'max') of ``T.min().item()`` or ``T.max()``."""
    node = _unwrap_item(node)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("min", "max")
        and not node.args
        and isinstance(node.func.value, ast.Name)
    ):
        return node.func.value.id, node.func.attr
    return None
