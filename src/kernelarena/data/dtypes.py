"""Data types by their FlashInfer-Trace names, and what they are in torch.

FlashInfer-Trace names: float32, float16, bfloat16, float8_e4m3fn, float8_e5m2, float4_e2m1,
int64, int32, int16, int8, bool. kernelarena adds uint8 (FlashInfer-Bench 0.1.2 does not load it).

``float4_e2m1`` tensors are held packed, two values a byte, as torch's ``float4_e2m1fn_x2``: the
even element sits in the low nibble. A shape over such a tensor counts bytes (packed pairs), so a
row of k values has k/2 entries.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class DType(str, Enum):
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT8_E4M3FN = "float8_e4m3fn"
    FLOAT8_E5M2 = "float8_e5m2"
    FLOAT4_E2M1 = "float4_e2m1"
    INT64 = "int64"
    INT32 = "int32"
    INT16 = "int16"
    INT8 = "int8"
    UINT8 = "uint8"
    BOOL = "bool"

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_low_precision_float(self) -> bool:
        """FP8 and FP4: stored as bit patterns; generated over the whole code range."""
        return self in (DType.FLOAT8_E4M3FN, DType.FLOAT8_E5M2, DType.FLOAT4_E2M1)

    @property
    def itemsize(self) -> int:
        """Bytes per stored element (a packed FP4 element holds two values in one byte)."""
        return _ITEMSIZE[self]

    @property
    def python_type(self) -> type:
        if self is DType.BOOL:
            return bool
        return float if self in _FLOATS else int

    def to_torch(self) -> torch.dtype:
        import torch

        return getattr(torch, _TORCH_NAME[self])  # type: ignore[no-any-return]

    @classmethod
    def from_torch(cls, dtype: torch.dtype) -> DType:
        name = str(dtype).removeprefix("torch.")
        for member, torch_name in _TORCH_NAME.items():
            if torch_name == name:
                return member
        raise ValueError(f"torch dtype {dtype} has no FlashInfer-Trace name")


_FLOATS = frozenset(
    {
        DType.FLOAT32,
        DType.FLOAT16,
        DType.BFLOAT16,
        DType.FLOAT8_E4M3FN,
        DType.FLOAT8_E5M2,
        DType.FLOAT4_E2M1,
    }
)

_ITEMSIZE = {
    DType.FLOAT32: 4,
    DType.FLOAT16: 2,
    DType.BFLOAT16: 2,
    DType.FLOAT8_E4M3FN: 1,
    DType.FLOAT8_E5M2: 1,
    DType.FLOAT4_E2M1: 1,
    DType.INT64: 8,
    DType.INT32: 4,
    DType.INT16: 2,
    DType.INT8: 1,
    DType.UINT8: 1,
    DType.BOOL: 1,
}

_TORCH_NAME = {
    DType.FLOAT32: "float32",
    DType.FLOAT16: "float16",
    DType.BFLOAT16: "bfloat16",
    DType.FLOAT8_E4M3FN: "float8_e4m3fn",
    DType.FLOAT8_E5M2: "float8_e5m2",
    DType.FLOAT4_E2M1: "float4_e2m1fn_x2",
    DType.INT64: "int64",
    DType.INT32: "int32",
    DType.INT16: "int16",
    DType.INT8: "int8",
    DType.UINT8: "uint8",
    DType.BOOL: "bool",
}
