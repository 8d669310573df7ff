"""Inputs for a workload: seeded random tensors for every dtype, scalars, safetensors, poisoned outputs.

Random tensors: floats standard normal (never zeros); FP8 and FP4 uniform over every finite bit pattern,
so all codes appear; ints in [-100, 100); uint8 over [0, 256); bool uniform. Inputs that a definition's
value constraints read are drawn to meet them (``kernelarena.data.constraints`` says which forms):
offsets arrays monotone from 0 to their total, bounded indices inside their caches. The reference's
optional ``make_inputs(axes, inputs, params, generator, device)`` then shapes them (derived layouts,
narrow distributions, strided rows). Last, every value constraint is checked on the finished set: one
that does not hold raises InputsError naming it and where each input it reads came from.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from kernelarena.data import DType, SafetensorsInput, ScalarInput, Workload
from kernelarena.data.definition import Definition, TensorSpec
from kernelarena.data.expressions import ExpressionError, evaluate, names

Value = torch.Tensor | float | int | bool


class InputsError(ValueError):
    """A workload's inputs break a value constraint, or cannot be generated to meet one."""


def seed_for(workload: Workload, salt: str) -> int:
    digest = hashlib.sha256(f"{workload.uuid}/{salt}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@lru_cache(maxsize=4)
def _finite_codes(dtype: DType) -> torch.Tensor:
    """Every byte whose FP8 value is finite (NaN and, for e5m2, Inf excluded)."""
    values = torch.arange(256, dtype=torch.uint8).view(dtype.to_torch()).float()
    return torch.nonzero(torch.isfinite(values)).flatten().to(torch.uint8)


def random_tensor(
    spec: TensorSpec, shape: tuple[int, ...], generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    dtype = spec.dtype
    if dtype.is_float and not dtype.is_low_precision_float:
        return torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(
            dtype.to_torch()
        )
    if dtype is DType.FLOAT4_E2M1:
        raw = torch.randint(0, 256, shape, generator=generator, device=device, dtype=torch.uint8)
        return raw.view(dtype.to_torch())
    if dtype in (DType.FLOAT8_E4M3FN, DType.FLOAT8_E5M2):
        codes = _finite_codes(dtype).to(device)
        index = torch.randint(0, codes.numel(), shape, generator=generator, device=device)
        return codes[index].view(dtype.to_torch())
    if dtype is DType.BOOL:
        return torch.randint(
            0, 2, shape, generator=generator, device=device, dtype=torch.uint8
        ).bool()
    if dtype is DType.UINT8:
        return torch.randint(0, 256, shape, generator=generator, device=device, dtype=torch.uint8)
    return torch.randint(
        -100, 100, shape, generator=generator, device=device, dtype=dtype.to_torch()
    )


def random_scalar(spec: TensorSpec, generator: torch.Generator) -> float | int | bool:
    draw = torch.rand((), generator=generator, device=generator.device).item()
    if spec.dtype is DType.BOOL:
        return draw < 0.5
    if spec.dtype.is_float:
        return 0.5 + draw
    return 1 + int(draw * 9)


def load_reference(definition: Definition) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"kernelarena_reference_{definition.name}"}
    exec(compile(definition.reference, f"<reference of {definition.name}>", "exec"), namespace)
    return namespace


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


# A draw's floating-point inputs as (scale, shift) of the standard normal they start from.
Distribution = tuple[float, float]
STANDARD: Distribution = (1.0, 0.0)


def generate_inputs(
    definition: Definition,
    workload: Workload,
    axes: dict[str, int],
    device: torch.device,
    seed: int,
    make_inputs: Callable[..., dict[str, Value]] | None,
    blob_root: Path | None = None,
    distribution: Distribution = STANDARD,
) -> dict[str, Value]:
    drawn = plain_inputs(definition, workload, axes, device, seed, blob_root, distribution)
    if make_inputs is None:
        check_value_constraints(definition, axes, drawn.inputs, drawn.origins)
        return drawn.inputs
    inputs = dict(
        make_inputs(dict(axes), drawn.inputs, dict(workload.params or {}), drawn.generator, device)
    )
    check_value_constraints(definition, axes, inputs, shaped_origins(drawn.origins, inputs))
    return inputs


@dataclass
class PlainInputs:
    """A draw before the reference's ``make_inputs`` shapes it: the values, where each came from,
    and the generator in the state ``make_inputs`` continues from."""

    inputs: dict[str, Value]
    origins: dict[str, str]
    generator: torch.Generator


def plain_inputs(
    definition: Definition,
    workload: Workload,
    axes: dict[str, int],
    device: torch.device,
    seed: int,
    blob_root: Path | None = None,
    distribution: Distribution = STANDARD,
) -> PlainInputs:
    """Every input drawn, generated or loaded, before ``make_inputs`` and the constraints' check
    (``generate_inputs`` does both; the judge runs ``make_inputs`` in the reference's sandbox)."""
    generator = make_generator(device, seed)
    inputs: dict[str, Value] = {}
    origins: dict[str, str] = {}
    for name, spec in definition.inputs.items():
        given = workload.inputs.get(name)
        if isinstance(given, ScalarInput):
            inputs[name], origins[name] = given.value, "the workload's scalar"
        elif isinstance(given, SafetensorsInput):
            inputs[name] = _load_blob(blob_root, given, name).to(device)
            origins[name] = f"safetensors '{given.path}'"
        elif spec.shape is None:
            inputs[name], origins[name] = random_scalar(spec, generator), "random"
        else:
            shape = definition.shape_of(spec, axes)
            assert shape is not None
            inputs[name], origins[name] = random_tensor(spec, shape, generator, device), "random"
    if distribution != STANDARD:
        _redistribute(definition, inputs, origins, distribution)
    # Drawn after every plain input, so definitions without value constraints draw what they always did.
    for name in definition.inputs:
        if origins[name] == "random" and definition.value_plan.generated(name):
            inputs[name] = _constrained_tensor(definition, name, axes, generator, device)
            origins[name] = "generated to meet the constraints"
    return PlainInputs(inputs, origins, generator)


def input_bytes(definition: Definition, axes: dict[str, int]) -> int:
    """The bytes of a set's tensor inputs at ``axes``, before anything is drawn."""
    return sum(
        definition.nbytes(name, axes)
        for name, spec in definition.inputs.items()
        if spec.shape is not None
    )


def shaped_origins(origins: dict[str, str], inputs: dict[str, Value]) -> dict[str, str]:
    """Where each input of a set ``make_inputs`` returned came from, for ``InputsError``."""
    return {n: f"{origins.get(n, 'random')}, then make_inputs" for n in inputs}


def _redistribute(
    definition: Definition,
    inputs: dict[str, Value],
    origins: dict[str, str],
    distribution: Distribution,
) -> None:
    """Scale and shift, in place, the random floating-point tensors no value constraint reads
    (FP8 and FP4 codes aside): a kernel right only on inputs near the standard normal (a copy
    passing for a LayerNorm of rows already normalised) fails on these."""
    scale, shift = distribution
    read = {n for constraint in definition.value_plan.checks for n in names(constraint)}
    for name, value in inputs.items():
        dtype = definition.inputs[name].dtype
        if (
            origins[name] == "random"
            and isinstance(value, torch.Tensor)
            and dtype.is_float
            and not dtype.is_low_precision_float
            and name not in read
        ):
            value.mul_(scale).add_(shift)


def check_value_constraints(
    definition: Definition,
    axes: dict[str, int],
    inputs: dict[str, Value],
    origins: dict[str, str] | None = None,
) -> None:
    """Raise InputsError for the first value constraint that the inputs break."""
    variables = {**inputs, **axes}
    for constraint in definition.value_plan.checks:
        try:
            holds, detail = bool(evaluate(constraint, variables)), ""
        except ExpressionError as error:
            holds, detail = False, f" ({error})"
        if holds:
            continue
        read = sorted(names(constraint))
        shown = ", ".join(_describe(n, variables.get(n), (origins or {}).get(n)) for n in read)
        if constraint in definition.value_plan.unmet and not _made_by_make_inputs(origins):
            raise InputsError(
                f"cannot generate inputs for '{definition.name}': constraint '{constraint}' is not "
                "of a form the generator meets ('<axes> == t[-1].item()' offsets; 't.min()', "
                "'t.max()' or '(t < <axes>).all()' bounds): give its inputs as safetensors or define "
                f"make_inputs in the reference. Read: {shown}{detail}"
            )
        raise InputsError(
            f"inputs of '{definition.name}' break constraint '{constraint}'{detail}. Read: {shown}"
        )


def _made_by_make_inputs(origins: dict[str, str] | None) -> bool:
    return any("make_inputs" in origin for origin in (origins or {}).values())


def _describe(name: str, value: object, origin: str | None) -> str:
    if isinstance(value, torch.Tensor):
        text = f"{name} of shape {tuple(value.shape)}"
        if value.dim() == 1 and 0 < value.numel() <= 8:
            text += f" = {value.tolist()}"
        elif value.numel() > 0 and not value.dtype.is_floating_point:
            text += f" in [{int(value.min())}, {int(value.max())}]"
    else:
        text = f"{name} = {value}"
    return f"{text} ({origin})" if origin else text


def _constrained_tensor(
    definition: Definition,
    name: str,
    axes: dict[str, int],
    generator: torch.Generator,
    device: torch.device,
) -> torch.Tensor:
    spec = definition.inputs[name]
    shape = definition.shape_of(spec, axes)
    assert shape is not None
    plan = definition.value_plan
    # Python's sampler draws k of n values in O(k), whatever n: seeded from the workload's generator.
    sampler = random.Random(int(torch.randint(0, 2**62, (), generator=generator, device=device)))
    if name in plan.offsets:
        offsets = plan.offsets[name]
        total = int(evaluate(offsets.total, axes))
        values = _offsets(shape[0], total, sampler)
        if values is None:
            raise InputsError(
                f"cannot generate inputs for '{definition.name}': constraint "
                f"'{offsets.constraint}' needs '{name}' ({shape[0]} entries, so {shape[0] - 1} "
                f"segments) to rise from 0 to {total}"
            )
        return torch.tensor(values, dtype=spec.dtype.to_torch(), device=device)
    return _bounded(definition, name, shape, axes, sampler, generator, device)


def _offsets(length: int, total: int, sampler: random.Random) -> list[int] | None:
    """0 = t[0] <= t[1] <= ... <= t[-1] = total, every segment non-empty where total allows."""
    segments = length - 1
    if segments < 0 or total < 0 or (segments == 0 and total != 0):
        return None
    if segments == 0:
        return [0]
    if total >= segments:
        cuts = sampler.sample(range(1, total), segments - 1)
    else:  # more segments than units: some are empty
        cuts = [sampler.randint(0, total) for _ in range(segments - 1)]
    return [0, *sorted(cuts), total]


def _bounded(
    definition: Definition,
    name: str,
    shape: tuple[int, ...],
    axes: dict[str, int],
    sampler: random.Random,
    generator: torch.Generator,
    device: torch.device,
) -> torch.Tensor:
    spec, bounds = definition.inputs[name], definition.value_plan.bounds[name]
    low = evaluate(bounds.low, axes) if bounds.low else None
    high = evaluate(bounds.high, axes) if bounds.high else None
    # A one-sided bound keeps a span of 100 on the open side, the span of plain random integers.
    low = low if low is not None else (0 if high is None or high > 0 else high - 100)
    high = high if high is not None else low + 100
    dtype = spec.dtype.to_torch()
    if spec.dtype.is_float:
        unit = torch.rand(shape, generator=generator, device=device, dtype=torch.float32)
        return (low + (high - low) * unit).to(dtype)
    low, high, count = int(low), int(high), math.prod(shape)
    if count > 0 and high <= low:
        raise InputsError(
            f"cannot generate inputs for '{definition.name}': '{name}' must lie in "
            f"[{low}, {high}), which is empty at axes {axes} (from {', '.join(bounds.sources)})"
        )
    if bounds.distinct and count <= high - low:
        values = sampler.sample(range(low, high), count)
        return torch.tensor(values, dtype=torch.int64).reshape(shape).to(device, dtype)
    return torch.randint(low, max(high, low + 1), shape, generator=generator, device=device).to(
        dtype
    )


def _load_blob(blob_root: Path | None, given: SafetensorsInput, name: str) -> torch.Tensor:
    from safetensors.torch import load_file

    if blob_root is None:
        raise FileNotFoundError(
            f"input '{name}': safetensors '{given.path}' but the dataset has no folder"
        )
    tensors = load_file(str(blob_root / given.path))
    if given.tensor_key not in tensors:
        raise KeyError(
            f"input '{name}': key '{given.tensor_key}' not in {given.path} (has {sorted(tensors)})"
        )
    return tensors[given.tensor_key]


def poison_value(dtype: DType) -> float | int | bool:
    """What unwritten output elements hold: NaN for floats, an unlikely value otherwise."""
    if dtype is DType.FLOAT4_E2M1:
        return -1  # byte 0xFF: both nibbles -6.0 (e2m1 has no NaN)
    if dtype.is_float:
        return math.nan
    if dtype is DType.BOOL:
        return True
    if dtype is DType.UINT8:
        return 0xA5
    return {1: -0x5A, 2: -0x5A5A}.get(dtype.itemsize, -0x5A5A5A5A)


def allocate_outputs(
    definition: Definition, axes: dict[str, int], device: torch.device
) -> dict[str, torch.Tensor]:
    outputs = {}
    for name, spec in definition.outputs.items():
        if spec.aliases is not None:
            continue
        shape = definition.shape_of(spec, axes) or ()
        outputs[name] = torch.empty(shape, dtype=spec.dtype.to_torch(), device=device)
        poison(outputs[name], spec.dtype)
    return outputs


def poison(tensor: torch.Tensor, dtype: DType) -> None:
    value = poison_value(dtype)
    if dtype is DType.FLOAT4_E2M1:
        tensor.view(torch.uint8).fill_(0xFF)
    elif dtype.is_low_precision_float:
        tensor.view(torch.uint8).fill_(0x7F)  # NaN in e4m3fn and e5m2
    else:
        tensor.fill_(value)


def to_float64(tensor: torch.Tensor, dtype: DType) -> torch.Tensor:
    """A float64 view of values for comparison (FP4 unpacked two values a byte, low nibble first)."""
    if dtype is DType.FLOAT4_E2M1:
        table = torch.tensor(
            [
                0.0,
                0.5,
                1.0,
                1.5,
                2.0,
                3.0,
                4.0,
                6.0,
                -0.0,
                -0.5,
                -1.0,
                -1.5,
                -2.0,
                -3.0,
                -4.0,
                -6.0,
            ],
            dtype=torch.float64,
            device=tensor.device,
        )
        raw = tensor.view(torch.uint8).to(torch.int64)
        return torch.stack([table[raw & 0xF], table[raw >> 4]], dim=-1).flatten(-2)
    return tensor.to(torch.float64)
