"""What fails a job: the errors a check raises, the description of a value-returning solution's
results it checks, and how the errors of several comparisons merge into a trace's correctness."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernelarena.data import Correctness, Status
from kernelarena.runtime.compare import Comparison

if TYPE_CHECKING:
    from kernelarena.evaluate.judge.shared_sets import CheckedJob


class CheckFailed(Exception):
    def __init__(self, status: Status, log: str, correctness: Correctness | None = None) -> None:
        super().__init__(log)
        self.status = status
        self.log = log
        self.correctness = correctness


class SolutionFailed(Exception):
    """The sandbox answered a request with an error (an exception in the solution's code)."""

    def __init__(self, reply: dict[str, Any]) -> None:
        super().__init__(str(reply.get("error", "")))
        self.kind = str(reply.get("kind", "runtime"))
        self.log = str(reply.get("error", ""))[-6000:]
        self.healthy = reply.get("healthy") is not False


def expect_success(reply: dict[str, Any]) -> None:
    if "error" in reply:
        raise SolutionFailed(reply)


# How a set's outputs look when work on them is still running after the call returned.
LEFT_RUNNING = (
    "outputs were still being written after the call returned: the solution leaves work running "
    "(e.g. on another stream) that its timing does not count"
)


def expect_stream_order(reply: dict[str, Any], what: str) -> None:
    """A check pass's reply (``stream_order``): no set's outputs changed after the calls
    returned, on the caller's stream."""
    if reply.get("unordered"):
        raise CheckFailed(
            Status.RUNTIME_ERROR,
            f"{LEFT_RUNNING}; in {what} the caller's stream was not made to wait for it, so the "
            "next kernel a caller enqueues reads the outputs unfinished",
        )


def check_returned(job: CheckedJob, returned: Any) -> None:
    """A value-returning call's results, as the sandbox describes them: count, type, dtype, shape.
    (The values themselves are read from the judge's own buffers.)"""
    definition = job.definition
    names = list(definition.outputs)
    if not isinstance(returned, list):
        raise CheckFailed(Status.RUNTIME_ERROR, "the solution's process described no results")
    if len(returned) != len(names):
        raise CheckFailed(
            Status.INCORRECT_SHAPE,
            f"the solution returned {len(returned)} outputs; the definition has {len(names)} "
            f"({', '.join(names)})",
        )
    for name, item in zip(names, returned, strict=True):
        spec = definition.outputs[name]
        kind = str(item.get("type")) if isinstance(item, dict) else "?"
        if kind != "Tensor":
            raise CheckFailed(
                Status.INCORRECT_SHAPE,
                f"the solution returned {kind[:60]} for output '{name}', not a plain tensor on "
                "the device (a subclass or lazy value could do its work when read, untimed)",
            )
        if str(item.get("dtype")) != str(spec.dtype.to_torch()):
            raise CheckFailed(
                Status.INCORRECT_DTYPE,
                f"the solution: output '{name}' has dtype {str(item.get('dtype'))[:40]}, "
                f"expected {spec.dtype.value}",
            )
        shape = tuple(definition.shape_of(spec, job.axes) or ())
        got = item.get("shape")
        if not isinstance(got, list) or tuple(got) != shape:
            raise CheckFailed(
                Status.INCORRECT_SHAPE,
                f"the solution: output '{name}' has shape {_shape_text(got)}, expected {shape}",
            )


def _shape_text(shape: Any) -> str:
    return str(tuple(shape))[:80] if isinstance(shape, list) else "unknown"


def merge(worst: Correctness, comparisons: list[Comparison]) -> Correctness:
    return Correctness(
        max_absolute_error=max(
            [worst.max_absolute_error, *(c.max_absolute_error for c in comparisons)]
        ),
        max_relative_error=max(
            [worst.max_relative_error, *(c.max_relative_error for c in comparisons)]
        ),
        extra=worst.extra,
        error_ratio=worst.error_ratio,
    )


def with_details(worst: Correctness, comparisons: list[Comparison]) -> Correctness:
    merged = merge(worst, comparisons)
    merged.extra = {
        c.name: {
            "mismatched": c.mismatched,
            "total": c.total,
            "first_mismatches": [
                {
                    "index": list(m["index"]),
                    "got": _finite_or_text(m["got"]),
                    "expected": _finite_or_text(m["expected"]),
                }
                for m in c.first_mismatches
            ],
        }
        for c in comparisons
        if not c.ok
    }
    return merged


def _finite_or_text(value: float) -> float | str:
    return value if value == value and abs(value) != float("inf") else str(value)
