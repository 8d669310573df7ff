"""What the judge reads in a reference sandbox's replies: where a described result sits (its dtype,
shape and strides, checked before the judge allocates room for it), and a death note in brief.
A reply is the reference's word, so nothing in it is trusted: a field of the wrong type, a size
past ``RESULT_BYTES_LIMIT`` or a shape whose strides do not match is ``BadReply``."""

from __future__ import annotations

from typing import Any

import torch

from kernelarena.evaluate.sandbox.arena import kept_strides

Place = tuple[torch.dtype, tuple[int, ...], tuple[int, ...]]  # dtype, shape, strides
# Described results past this size are refused: the judge would allocate them.
RESULT_BYTES_LIMIT = 1 << 36
_DTYPES = {str(t): t for t in vars(torch).values() if isinstance(t, torch.dtype)}


class BadReply(Exception):
    """A described result the judge will not take: ``what`` the reference did, ``detail``."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"{what}: {detail}")
        self.what, self.detail = what, detail


def contiguous(dtype: torch.dtype, shape: tuple[int, ...]) -> Place:
    return dtype, shape, tuple(torch.empty(shape, device="meta").stride())


def described_place(item: Any) -> Place:
    """A described tensor's dtype, shape and strides, checked: the judge allocates it."""
    described = item if isinstance(item, dict) else {}
    dtype = _DTYPES.get(str(described.get("dtype")))
    shape, stride = _sizes(described.get("shape")), _sizes(described.get("stride"))
    if described.get("type") != "Tensor" or dtype is None or shape is None or stride is None:
        what = str(described.get("type", type(item).__name__))
        raise BadReply("is broken", f"it gave {what[:60]} where a tensor belongs")
    if len(shape) != len(stride):
        raise BadReply("answered something that is not a reply", str(described)[:200])
    place: Place = (dtype, shape, kept_strides(shape, stride))
    if place_bytes(place) > RESULT_BYTES_LIMIT:
        raise BadReply("is broken", f"a result of shape {shape} is too large")
    return place


def described_items(described: Any, count: int) -> list[Any]:
    """``described`` where it is a list of ``count`` items, else ``count`` placeholders."""
    return described if isinstance(described, list) and len(described) == count else [0] * count


def fits(target: torch.Tensor, place: Place) -> bool:
    return target.dtype == place[0] and tuple(target.shape) == place[1]


def place_bytes(place: Place) -> int:
    dtype, shape, _ = place
    count = 1
    for size in shape:
        count *= size
    return count * dtype.itemsize


def brief(text: str) -> str:
    """A death note's first line and its log's last (what the reference printed last)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("kernelarena sandbox on")]
    if len(lines) <= 1:
        return lines[0][:300] if lines else ""
    return f"{lines[0][:300]} (its log ends: {lines[-1][:200]})"


def _sizes(value: Any) -> tuple[int, ...] | None:
    """A list of sizes or strides from a reply, or None where it is not one."""
    if not isinstance(value, list) or len(value) > 64:
        return None
    if not all(type(n) is int and 0 <= n < 1 << 40 for n in value):
        return None
    return tuple(value)
