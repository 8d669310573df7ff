"""Arithmetic over axis names: derived axes, constraints, byte and FLOP counts.

A small evaluator over Python's expression syntax, so that ``k // 2``, ``m % 128 == 0`` or
``2 * batch * hidden * 2`` read as they would in Python, without ``eval``: only numbers, names,
arithmetic, comparisons, ``and``/``or``/``not``, a conditional and the functions in ``FUNCTIONS``
(plus any the caller passes) are accepted.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any


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
}

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
            *_BINARY,
            *_UNARY,
            *_COMPARE,
        )
        if not isinstance(node, allowed):
            raise ExpressionError(f"{expression!r}: {type(node).__name__} is not allowed")
        if isinstance(node, ast.Call) and not isinstance(node.func, ast.Name):
            raise ExpressionError(f"{expression!r}: only plain function calls are allowed")
        if isinstance(node, ast.Constant) and not isinstance(node.value, int | float | str):
            raise ExpressionError(f"{expression!r}: constant {node.value!r} is not allowed")
    return tree


def names(expression: str) -> set[str]:
    """Names the expression reads, functions excluded."""
    tree = parse(expression)
    called = {
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


def evaluate(
    expression: str,
    variables: Mapping[str, Any],
    functions: Mapping[str, Callable[..., Any]] | None = None,
) -> Any:
    """Evaluate ``expression`` with ``variables`` bound; raise ExpressionError on unknown names."""
    table = {**FUNCTIONS, **(functions or {})}
    return _eval(parse(expression).body, variables, table, expression)


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
    raise ExpressionError(f"{source!r}: cannot evaluate {ast.dump(node)}")
