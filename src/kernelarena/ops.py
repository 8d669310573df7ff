"""Every built-in operator as a plain function that dispatches through apply, and as the custom op
``torch.ops.kernelarena.<name>`` (with a fake implementation, for ``torch.compile``).

    import kernelarena.ops as ops
    y = ops.rmsnorm(x, weight, 1e-6)          # rmsnorm_fp32 / _fp16 / _bf16 by the dtype of x

Generated from the library's Definitions (``kernelarena.dispatch.ops``); ``PROBLEMS`` lists any
operator that could not be made. Importing this module imports torch and registers the ops.
"""

from __future__ import annotations

from typing import Any

from kernelarena.dispatch.ops import PROBLEMS, build_operators

OPERATORS = build_operators()
globals().update(OPERATORS)
__all__ = ["OPERATORS", "PROBLEMS", *sorted(OPERATORS)]


def __getattr__(name: str) -> Any:
    raise AttributeError(
        f"kernelarena.ops has no operator '{name}'; operators: {', '.join(sorted(OPERATORS))}"
    )
