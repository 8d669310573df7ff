"""A solution's error measured against the reference's own: both taken against the reference run
in float64 on the same inputs, so that a tolerance loose enough for every honest kernel still fails
one that computes in a lower precision than the definition's dtype.

The reference runs twice on a trial's inputs: as the definition has it (its outputs are what
solutions are compared with) and on the inputs' floating-point tensors upcast to float64 (FP8 and
FP4 codes, integers and scalars stay as they are: a reference dequantizes those itself, in
whatever precision it computes). Each output's normwise relative error against the float64 run,
``||out - precise|| / ||precise||`` over the elements where the float64 run is finite, is taken for
the solution and for the reference; their ratio, the reference's error floored at an eighth of the
output dtype's machine epsilon (a float32 reference computed as the float64 run is has no error of
its own), must not pass the output's ``Tolerance.max_error_ratio`` (``DEFAULT_MAX_ERROR_RATIO``
where the definition sets none).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernelarena.data import Definition, DType
from kernelarena.runtime.inputs import Value

# The ratio a solution's error may reach over the reference's where a definition sets none. The
# library's solutions on the CPU (smoke workloads) reach at most 8.1 (the Triton fp32
# gelu_and_mul under the interpreter); a float32 operator computed in bfloat16 or TF32 reads
# 10^4 and more. Provisional until every library solution and peer is measured on both GPUs:
# a margin of 100x over the CPU's worst, for GPU kernels' approximate transcendentals.
DEFAULT_MAX_ERROR_RATIO = 1024.0
# Above this many bytes of float64 inputs, the precise run is skipped (an 8 GiB bf16 KV cache
# would take 32 GiB): the ratio is not measured for that workload.
PRECISE_BYTES_LIMIT = 4 << 30
# The reference's error is floored at this fraction of its dtype's machine epsilon: where the
# reference computes exactly as its float64 run does (both in float32), its error is 0. An eighth:
# rounding random values to a dtype leaves a normwise error of about a quarter of epsilon.
FLOOR_OF_EPSILON = 0.125
_EPSILON = {
    DType.FLOAT32: 2.0**-23,
    DType.FLOAT16: 2.0**-10,
    DType.BFLOAT16: 2.0**-7,
}


@dataclass(frozen=True)
class ErrorRatio:
    output: str
    ratio: float
    solution_error: float
    reference_error: float
    limit: float

    @property
    def ok(self) -> bool:
        return self.ratio <= self.limit

    def describe(self) -> str:
        return (
            f"{self.output}: error {self.solution_error:.3g} against the reference computed in "
            f"float64, {self.ratio:.3g}x the reference's own {self.reference_error:.3g} (at most "
            f"{self.limit:g}x): the solution computes in a lower precision than the definition's"
        )


def precise_inputs(definition: Definition, inputs: dict[str, Value]) -> dict[str, Value] | None:
    """The inputs with every floating-point tensor (FP8 and FP4 codes aside) in float64; None
    when that would take more than ``PRECISE_BYTES_LIMIT``."""
    floats = {
        name: value
        for name, value in inputs.items()
        if isinstance(value, torch.Tensor)
        and value.is_floating_point()
        and not definition.inputs[name].dtype.is_low_precision_float
    }
    # Counted before any copy is made: at batch 64 x 32k keys a float64 KV cache is 32 GiB, and
    # making its first half ran the reference's sandbox out of memory, the job skipped with it.
    if sum(tensor.numel() * 8 for tensor in floats.values()) > PRECISE_BYTES_LIMIT:
        return None
    upcast = {name: tensor.to(torch.float64) for name, tensor in floats.items()}
    return {name: upcast.get(name, value) for name, value in inputs.items()}


def ratios(
    definition: Definition,
    produced: dict[str, torch.Tensor],
    expected: dict[str, torch.Tensor],
    precise: dict[str, torch.Tensor],
) -> list[ErrorRatio]:
    """One ``ErrorRatio`` per floating-point output of the definition's float types."""
    found = []
    for name, spec in definition.outputs.items():
        epsilon = _EPSILON.get(spec.dtype)
        if epsilon is None or name not in precise:
            continue
        truth = precise[name].to(torch.float64)
        finite = torch.isfinite(truth)
        solution_error = normwise(produced[name], truth, finite)
        reference_error = normwise(expected[name], truth, finite)
        if solution_error is None or reference_error is None:
            continue
        limit = definition.tolerance_for(name).max_error_ratio or DEFAULT_MAX_ERROR_RATIO
        ratio = solution_error / max(reference_error, epsilon * FLOOR_OF_EPSILON)
        found.append(ErrorRatio(name, ratio, solution_error, reference_error, limit))
    return found


def normwise(value: torch.Tensor, truth: torch.Tensor, finite: torch.Tensor) -> float | None:
    """``||value - truth|| / ||truth||`` where ``truth`` is finite (the absolute norm where the
    truth is all zeros); None where the shapes differ or nothing is finite."""
    if value.shape != truth.shape or not bool(finite.any()):
        return None
    difference = (value.to(torch.float64) - truth)[finite]
    scale = float(torch.linalg.vector_norm(truth[finite]))
    error = float(torch.linalg.vector_norm(difference))
    if error != error:  # NaN where the truth is finite: as far off as it gets
        return float("inf")
    return error / scale if scale > 0 else error
