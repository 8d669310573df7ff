"""Trace: the record of evaluating one solution on one workload.

FlashInfer-Bench's loader rejects ``correctness`` or ``performance`` on a status that does not allow
them (PASSED has both, INCORRECT_NUMERICAL only correctness, the rest neither); we enforce the same.
Its ``performance`` holds latency_ms, reference_latency_ms and speedup_factor; the spread of the
timings, the sample count, achieved rates and the content hashes are extra fields, which it ignores.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator, model_validator

from kernelarena.data._base import NonEmptyString, PathComponent, Schema
from kernelarena.data.workload import Workload

if TYPE_CHECKING:
    from kernelarena.data.definition import Definition
    from kernelarena.data.solution import Solution


class Status(str, Enum):
    PASSED = "PASSED"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
    INCORRECT_DTYPE = "INCORRECT_DTYPE"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    COMPILE_ERROR = "COMPILE_ERROR"
    TIMEOUT = "TIMEOUT"


class Correctness(Schema):
    max_relative_error: float = 0.0
    max_absolute_error: float = 0.0
    extra: dict[str, Any] | None = None
    # ours: the worst output's normwise error against the reference computed in float64, over
    # the reference's own (``evaluate.sandbox.error_ratio``); None where it was not measured.
    error_ratio: float | None = None

    @field_validator("max_relative_error", "max_absolute_error")
    @classmethod
    def _non_negative_or_nan(cls, value: float) -> float:
        if not math.isnan(value) and value < 0:
            raise ValueError("must be non-negative or NaN")
        return value


class Performance(Schema):
    latency_ms: float = Field(default=0.0, ge=0.0)
    reference_latency_ms: float = Field(default=0.0, ge=0.0)
    speedup_factor: float = Field(default=0.0, ge=0.0)
    # ours
    latency_p20_ms: float | None = None
    latency_p80_ms: float | None = None
    sample_count: int | None = None
    samples_ms: list[float] | None = None
    timing_mode: str | None = None
    bytes_moved: float | None = None
    flops: float | None = None
    achieved_gbps: float | None = None
    achieved_tflops: float | None = None
    ceiling_fraction: float | None = None
    # Per-call wall time of an eager loop measured by the judge's clock, host launch included: what a
    # caller outside CUDA graph capture pays. latency_ms stays the GPU time.
    eager_call_ms: float | None = None
    # Host time a call takes to return in a short burst of eager calls, before any synchronization
    # (its launch and whatever else it does on the CPU): how near to host-bound eager_call_ms is,
    # which a host with a slower CPU than this one's reaches first. The sandbox's clock, capped by
    # eager_call_ms.
    host_submit_ms: float | None = Field(default=None, ge=0.0)
    # Frames torch.compile (dynamo) compiled during the timed calls: a figure taken while compiling.
    compiles_while_timed: int | None = None
    # False where the solution's CUDA graph failed (its capture, or replays that did not do the
    # work its calls do) and it was timed with events instead: apply never runs it in a capture.
    capturable: bool | None = None


class Environment(Schema):
    hardware: NonEmptyString
    libs: dict[str, str] = Field(default_factory=dict)
    # ours
    device: str | None = None
    ceilings: dict[str, float] | None = None


class Evaluation(Schema):
    status: Status
    environment: Environment
    timestamp: NonEmptyString
    log: str = ""
    correctness: Correctness | None = None
    performance: Performance | None = None

    @model_validator(mode="after")
    def _metrics_match_status(self) -> Evaluation:
        wants_correctness = self.status in (Status.PASSED, Status.INCORRECT_NUMERICAL)
        wants_performance = self.status is Status.PASSED
        if wants_correctness != (self.correctness is not None):
            verb = "must" if wants_correctness else "must not"
            raise ValueError(f"correctness: {verb} be present when status is {self.status.value}")
        if wants_performance != (self.performance is not None):
            verb = "must" if wants_performance else "must not"
            raise ValueError(f"performance: {verb} be present when status is {self.status.value}")
        return self


class TraceHashes(Schema):
    definition: str
    workload: str
    solution: str | None = None

    @classmethod
    def of(cls, definition: Definition, solution: Solution, workload: Workload) -> TraceHashes:
        """Today's content hashes: a trace describes today's code only while its own equal these."""
        return cls(
            definition=definition.content_hash(),
            solution=solution.content_hash(),
            workload=workload.content_hash(),
        )


class Trace(Schema):
    definition: PathComponent  # names the workload and trace files
    workload: Workload
    solution: str | None = None
    evaluation: Evaluation | None = None
    hashes: TraceHashes | None = None

    @property
    def is_workload(self) -> bool:
        return self.solution is None and self.evaluation is None

    @property
    def passed(self) -> bool:
        return self.evaluation is not None and self.evaluation.status is Status.PASSED
