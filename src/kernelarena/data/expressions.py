"""Arithmetic over axis names and tensors: derived axes, constraints, byte and FLOP counts.

A small evaluator over Python's expression syntax, so that ``k // 2``, ``m % 128 == 0`` or
``2 * batch * hidden * 2`` read as they would in Python, without ``eval``: only numbers, names,
arithmetic, comparisons, ``and``/``or``/``not``, a conditional and the functions in ``FUNCTIONS``
(plus any the caller passes) are accepted. FlashInfer-Trace's constraints also read tensors, so a
name may stand for a tensor: ``x.shape[0]``, ``x.ndim``, subscripts (``kv_indptr[-1]``, ``x[1:]``)
and the methods in ``METHODS`` (``kv_indptr[-1].item()``). Nothing else is reachable: no other
attribute, no keyword argument, no call of a value that is not on one of these lists.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal


class ExpressionError(ValueError):
    """An expression that does not parse, uses something not allowed, or names an unknown axis."""


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "ceil_div": _ceil_div,
    "log2": math.log2,
    "int": int,
    "len": len,
}

# Tensor methods a constraint may call: reading one value and reductions, nothing that writes.
METHODS = frozenset({"item", "numel", "dim", "size", "sum", "min", "max", "all", "any"})
# The methods among them that read only the shape, never a value.
SHAPE_METHODS = frozenset({"numel", "dim", "size"})
# Attributes a constraint may read (of a tensor, or of a stand-in that knows only the shape).
ATTRIBUTES = frozenset({"shape", "ndim"})

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


@lru_cache(maxsize=4096)
def parse(expression: str) -> ast.Expression:
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as error:
        raise ExpressionError(f"cannot parse {expression!r}: {error.msg}") from None
    for node in ast.walk(tree):
        allowed = (
            ast.Expression,
            ast.Constant,
            ast.Name,
            ast.Load,
            ast.BinOp,
            ast.UnaryOp,
            ast.BoolOp,
            ast.Compare,
            ast.Call,
            ast.IfExp,
            ast.And,
            ast.Or,
            ast.Attribute,
            ast.Subscript,
            ast.Slice,
            ast.Tuple,
            *_BINARY,
            *_UNARY,
            *_COMPARE,
        )
        if not isinstance(node, allowed):
            raise ExpressionError(f"{expression!r}: {type(node).__name__} is not allowed")
        if isinstance(node, ast.Call) and not _callable_node(node.func):
            raise ExpressionError(
                f"{expression!r}: only the functions {sorted(FUNCTIONS)} and the tensor methods "
                f"{sorted(METHODS)} may be called"
            )
        if isinstance(node, ast.Attribute) and node.attr not in ATTRIBUTES | METHODS:
            raise ExpressionError(
                f"{expression!r}: attribute '{node.attr}' is not allowed (only {sorted(ATTRIBUTES)} "
                f"and the methods {sorted(METHODS)})"
            )
        if isinstance(node, ast.Constant) and not isinstance(node.value, int | float | str):
            raise ExpressionError(f"{expression!r}: constant {node.value!r} is not allowed")
    for node in ast.walk(tree):
        # A method name is only reachable as the callee of a call (``x.item`` alone is refused),
        # and a tuple only as the index of a subscript (``x[i, j]``).
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Tuple) and not (
                isinstance(node, ast.Subscript) and node.slice is child
            ):
                raise ExpressionError(f"{expression!r}: a tuple may only index, as in x[i, j]")
            if (
                isinstance(child, ast.Attribute)
                and child.attr in METHODS
                and not (isinstance(node, ast.Call) and node.func is child)
            ):
                raise ExpressionError(f"{expression!r}: method '{child.attr}' must be called")
    return tree


def _callable_node(func: ast.expr) -> bool:
    return isinstance(func, ast.Name) or (isinstance(func, ast.Attribute) and func.attr in METHODS)


def names(expression: str) -> set[str]:
    """Names the expression reads, functions excluded."""
    tree = parse(expression)
    called = {
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


@dataclass(frozen=True)
class Use:
    """How an expression reads a name: as a ``number`` (an axis, a scalar, a whole tensor in an
    elementwise comparison), for its ``shape`` (``x.shape[i]``, ``x.ndim``, ``len(x)``), or for its
    ``values`` (``x[-1]``, ``x.max()``). ``index`` is i of ``x.shape[i]`` when i is a constant."""

    name: str
    kind: Literal["number", "shape", "values"]
    index: int | None = None


def uses(expression: str) -> list[Use]:
    """Every read of a name in ``expression``, with how it is read (functions excluded)."""
    tree = parse(expression)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: list[Use] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Call) and parent.func is node:
            continue  # a function's name
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name):
            kind: Literal["number", "shape", "values"] = (
                "shape" if parent.func.id == "len" else "number"
            )
            found.append(Use(node.id, kind))
        elif isinstance(parent, ast.Attribute) and parent.attr in ATTRIBUTES | SHAPE_METHODS:
            found.append(Use(node.id, "shape", _constant_index(parents.get(parent), parent)))
        elif isinstance(parent, ast.Attribute | ast.Subscript) and parent.value is node:
            found.append(Use(node.id, "values"))
        else:
            found.append(Use(node.id, "number"))
    return found


def _constant_index(subscript: ast.AST | None, shape: ast.Attribute) -> int | None:
    """i of ``x.shape[i]`` when i is a literal integer (negative ones too), else None."""
    if shape.attr != "shape" or not isinstance(subscript, ast.Subscript):
        return None
    index = subscript.slice
    sign = 1
    if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub):
        index, sign = index.operand, -1
    if isinstance(index, ast.Constant) and type(index.value) is int:
        return sign * index.value
    return None


def evaluate(
    expression: str,
    variables: Mapping[str, Any],
    functions: Mapping[str, Callable[..., Any]] | None = None,
) -> Any:
    """Evaluate ``expression`` with ``variables`` bound; raise ExpressionError on unknown names and
    on anything the values refuse (an index out of range, a division by zero, a missing method)."""
    table = {**FUNCTIONS, **(functions or {})}
    try:
        return _eval(parse(expression).body, variables, table, expression)
    except (ArithmeticError, IndexError, AttributeError, TypeError, RuntimeError) as error:
        raise ExpressionError(f"{expression!r}: {type(error).__name__}: {error}") from None


def _eval(
    node: ast.AST,
    variables: Mapping[str, Any],
    functions: Mapping[str, Callable[..., Any]],
    source: str,
) -> Any:
    match node:
        case ast.Constant(value=value):
            return value
        case ast.Name(id=name):
            if name not in variables:
                raise ExpressionError(f"{source!r}: unknown name {name!r}")
            return variables[name]
        case ast.BinOp(left=left, op=op, right=right):
            return _BINARY[type(op)](
                _eval(left, variables, functions, source),
                _eval(right, variables, functions, source),
            )
        case ast.UnaryOp(op=op, operand=operand):
            return _UNARY[type(op)](_eval(operand, variables, functions, source))
        case ast.BoolOp(op=ast.And(), values=values):
            return all(_eval(v, variables, functions, source) for v in values)
        case ast.BoolOp(op=ast.Or(), values=values):
            return any(_eval(v, variables, functions, source) for v in values)
        case ast.Compare(left=left, ops=[comparison], comparators=[right_node]):
            # One comparison keeps its value as is: an elementwise tensor for ``(x >= 0).all()``.
            return _COMPARE[type(comparison)](
                _eval(left, variables, functions, source),
                _eval(right_node, variables, functions, source),
            )
        case ast.Compare(left=left, ops=ops, comparators=comparators):
            current = _eval(left, variables, functions, source)
            for comparison, right_node in zip(ops, comparators, strict=True):
                right = _eval(right_node, variables, functions, source)
                if not _COMPARE[type(comparison)](current, right):
                    return False
                current = right
            return True
        case ast.IfExp(test=test, body=body, orelse=orelse):
            branch = body if _eval(test, variables, functions, source) else orelse
            return _eval(branch, variables, functions, source)
        case ast.Call(func=ast.Name(id=name), args=args, keywords=[]):
            if name not in functions:
                raise ExpressionError(f"{source!r}: unknown function {name!r}")
            return functions[name](*(_eval(a, variables, functions, source) for a in args))
    return _eval_access(node, variables, functions, source)


def _eval_access(
    node: ast.AST,
    variables: Mapping[str, Any],
    functions: Mapping[str, Callable[..., Any]],
    source: str,
) -> Any:
    """Attribute reads, subscripts and method calls: the parts that reach into tensors."""
    match node:
        case ast.Attribute(value=value, attr=attr) if attr in ATTRIBUTES:
            return getattr(_eval(value, variables, functions, source), attr)
        case ast.Subscript(value=value, slice=index):
            target = _eval(value, variables, functions, source)
            return target[_eval(index, variables, functions, source)]
        case ast.Tuple(elts=elements):
            return tuple(_eval(e, variables, functions, source) for e in elements)
        case ast.Slice(lower=lower, upper=upper, step=step):
            bounds = (
                None if b is None else _eval(b, variables, functions, source)
                for b in (lower, upper, step)
            )
            return slice(*bounds)
        case ast.Call(func=ast.Attribute(value=value, attr=method), args=args, keywords=[]) if (
            method in METHODS
        ):
            target = _eval(value, variables, functions, source)
            return getattr(target, method)(*(_eval(a, variables, functions, source) for a in args))
    raise ExpressionError(f"{source!r}: cannot evaluate {ast.dump(node)}")
