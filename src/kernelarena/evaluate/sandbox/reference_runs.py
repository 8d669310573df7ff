"""A definition's reference called: what it must return, its run in float64, its timing.

The same functions serve the reference's own sandbox (``reference_serving``) and, where
``KERNELARENA_REFERENCE_SANDBOX=0`` keeps references in the judge, the judge
(``references.InJudgeReference``), so the two give the same outputs bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kernelarena.data import Definition
from kernelarena.evaluate.sandbox.error_ratio import precise_inputs
from kernelarena.evaluate.sandbox.graph_timing import graph_calls, time_cuda_graph
from kernelarena.evaluate.sandbox.timing import Timing, time_events_or_clock
from kernelarena.runtime.inputs import Value

# The reference is timed only for the speedup column: its graph replays stop after this long (at
# least 5 replays of 20+ calls), its per-call events after this long (at least the options'
# minimum of calls). A float32 reference of a large workload takes 10x the solution's time, and
# all 30 replays of it were a third of a whole run's evaluation time.
REFERENCE_GRAPH_BUDGET_MS = 20.0
REFERENCE_EVENTS_BUDGET_MS = 20.0


class ReferenceBroken(Exception):
    """The reference returned something that cannot be the definition's outputs."""


def _copies(values: list[Value]) -> list[Value]:
    """What the reference is given: copies, since a reference may write its inputs in place."""
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def _returned(result: Any) -> list[Any]:
    return list(result) if isinstance(result, tuple | list) else [result]


def expected_outputs(
    run: Callable[..., Any], definition: Definition, arguments: list[Value], own: bool = False
) -> list[torch.Tensor]:
    """The reference's outputs for ``arguments`` (the definition's inputs, in order), one tensor
    per output; ``ReferenceBroken`` where it returns anything else. ``own``: the arguments are
    the caller's to lose (a request's copies, used last here), so none is copied again."""
    with torch.no_grad():
        values = _returned(run(*(arguments if own else _copies(arguments))))
    names = list(definition.outputs)
    if len(values) != len(names) or not all(isinstance(v, torch.Tensor) for v in values):
        kinds = ", ".join(type(v).__name__ for v in values[:8])
        raise ReferenceBroken(
            f"it returned {len(values)} values ({kinds}) for outputs {names}; each must be a tensor"
        )
    return values


def precise_outputs(
    run: Callable[..., Any], definition: Definition, inputs: dict[str, Value]
) -> dict[str, torch.Tensor]:
    """The reference run on ``inputs`` upcast to float64 (``error_ratio.precise_inputs``), by
    output name; empty where it cannot run so (written for its dtypes only) or the upcast inputs
    would be too large."""
    upcast = precise_inputs(definition, inputs)
    if upcast is None:
        return {}
    # The upcast tensors are new already; the others (integers, FP8 and FP4 codes) are copied.
    arguments = [
        v.clone() if isinstance(v, torch.Tensor) and v is inputs[n] else v
        for n, v in ((n, upcast[n]) for n in definition.inputs)
    ]
    try:
        with torch.no_grad():
            values = _returned(run(*arguments))
    except Exception:  # a reference written for its dtypes only: not measured
        return {}
    if len(values) != len(definition.outputs):
        return {}
    return {
        n: v for n, v in zip(definition.outputs, values, strict=True) if isinstance(v, torch.Tensor)
    }


def time_reference(
    run: Callable[..., Any],
    device: torch.device,
    arguments: list[list[Value]],
    graph: bool,
    options: dict[str, Any],
) -> Timing:
    """The reference timed the way its solution was: CUDA graph replays over every set of
    ``arguments`` (``graph``), else events (the CPU: its clock) over the first two."""
    count = len(arguments)
    with torch.no_grad():
        if graph:
            try:
                return time_cuda_graph(
                    lambda i: run(*arguments[i % count]),
                    device,
                    calls_per_graph=graph_calls(count),
                    budget_ms=REFERENCE_GRAPH_BUDGET_MS,
                )
            except Exception:  # a reference that cannot be captured: events below
                torch.cuda.synchronize(device)
        pair = arguments[:2]
        return time_events_or_clock(
            lambda i: run(*pair[i % len(pair)]),
            device,
            warmup=options["warmup"],
            max_iterations=options["max_iterations"],
            min_iterations=options["min_iterations"],
            budget_ms=min(options["budget_ms"], REFERENCE_EVENTS_BUDGET_MS),
        )
