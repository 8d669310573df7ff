"""Inputs for a workload: seeded random tensors for every dtype, scalars, safetensors, poisoned outputs.

Random tensors: floats standard normal (never zeros); FP8 and FP4 uniform over every finite bit pattern,
so all codes appear; ints in [-100, 100); uint8 over [0, 256); bool uniform. The reference's optional
``make_inputs(axes, inputs, params, generator, device)`` then shapes them (derived layouts, offsets,
narrow distributions, strided rows).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from kernelarena.data import DType, SafetensorsInput, ScalarInput, Workload
from kernelarena.data.definition import Definition, TensorSpec

Value = torch.Tensor | float | int | bool


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


def generate_inputs(
    definition: Definition,
    workload: Workload,
    axes: dict[str, int],
    device: torch.device,
    seed: int,
    make_inputs: Callable[..., dict[str, Value]] | None,
    blob_root: Path | None = None,
) -> dict[str, Value]:
    generator = make_generator(device, seed)
    inputs: dict[str, Value] = {}
    for name, spec in definition.inputs.items():
        given = workload.inputs.get(name)
        if isinstance(given, ScalarInput):
            inputs[name] = given.value
        elif isinstance(given, SafetensorsInput):
            inputs[name] = _load_blob(blob_root, given, name).to(device)
        elif spec.shape is None:
            inputs[name] = random_scalar(spec, generator)
        else:
            shape = definition.shape_of(spec, axes)
            assert shape is not None
            inputs[name] = random_tensor(spec, shape, generator, device)
    if make_inputs is not None:
        inputs = dict(
            make_inputs(dict(axes), inputs, dict(workload.params or {}), generator, device)
        )
    return inputs


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
