"""Memory the judge owns and a sandbox maps: how tensors cross between them without a host trip.

On a GPU, tensors live in a memory pool of their own (``torch.cuda.MemPool``), so that the CUDA IPC
handle a sandbox opens (which covers a whole allocator segment) reaches only tensors that were handed
to it, never the judge's expected outputs or pristine copies; the handle is torch's own IPC reduction.
On a CPU, each tensor is a file in ``/dev/shm`` that both sides map shared; the judge unlinks it once
the sandbox has mapped it. What the judge keeps private is allocated the ordinary way.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing  # registers the CUDA IPC reductions with ForkingPickler

# (chunk id or a buffer's own handle, [(offset, dtype, shape, stride)]): where a set's tensors sit.
Layout = tuple[
    int | tuple[Any, ...], list[tuple[int, torch.dtype, tuple[int, ...], tuple[int, ...]]]
]
# Tensors start at multiples of this (CUDA's own allocation granularity).
ALIGNMENT = 256
CHUNK_BYTES = {"cuda": 256 << 20, "cpu": 16 << 20}


class Arena:
    """Chunks of shared memory, each handed to a sandbox once (an IPC handle costs to make and to
    open), from which each job's input sets are carved in order and which the next job reuses."""

    def __init__(self, device: torch.device, folder: Path | None = None) -> None:
        self.device = device
        self._pool = torch.cuda.MemPool() if device.type == "cuda" else None
        self.folder = folder or Path(tempfile.mkdtemp(prefix="kernelarena-arena-"))
        self._chunks: list[tuple[torch.Tensor, tuple[Any, ...]]] = []
        self._chunk = 0
        self._offset = 0
        self._files = 0  # files made so far: each gets a name of its own

    def share(self, values: list[torch.Tensor]) -> tuple[list[torch.Tensor], Layout]:
        """Contiguous copies of ``values`` side by side in a chunk, and where they sit."""
        offsets, total = [], 0
        strides = [_kept_strides(v) for v in values]
        for value, stride in zip(values, strides, strict=True):
            offsets.append(total)
            total += -(-_span(value.shape, stride) * value.element_size() // ALIGNMENT) * ALIGNMENT
        where: int | tuple[Any, ...]
        if total > CHUNK_BYTES[self.device.type]:
            # A set larger than a chunk gets a buffer of its own, freed with the set: kept as a
            # chunk, sets of a few GiB would pile up across jobs (an 8 GiB KV cache does).
            buffer, where = self._new_chunk(total)
            start = 0
        else:
            chunk, start = self._allocate(max(total, ALIGNMENT))
            buffer, where = self._chunks[chunk][0], chunk
        layout = [
            (start + o, v.dtype, tuple(v.shape), st)
            for o, v, st in zip(offsets, values, strides, strict=True)
        ]
        shared = [_view(buffer, *place) for place in layout]
        for target, value in zip(shared, values, strict=True):
            target.copy_(value)
        return shared, (where, layout)

    def handle(self, chunk: int) -> tuple[Any, ...]:
        return self._chunks[chunk][1]

    def mark(self) -> tuple[int, int]:
        return self._chunk, self._offset

    def rewind(self, mark: tuple[int, int]) -> None:
        """Sets carved since ``mark`` are forgotten: their room is reused."""
        self._chunk, self._offset = mark

    def reset(self) -> None:
        """Every set carved so far is forgotten: the next ones reuse the chunks from the start."""
        self._chunk, self._offset = 0, 0

    def _allocate(self, size: int) -> tuple[int, int]:
        while self._chunk < len(self._chunks):
            if self._offset + size <= self._chunks[self._chunk][0].numel():
                start = self._offset
                self._offset += size
                return self._chunk, start
            self._chunk, self._offset = self._chunk + 1, 0
        self._chunks.append(self._new_chunk(max(size, CHUNK_BYTES[self.device.type])))
        self._offset = size
        return self._chunk, 0

    def _new_chunk(self, size: int) -> tuple[torch.Tensor, tuple[Any, ...]]:
        if self._pool is not None:
            try:
                buffer = self._pool_buffer(size)
            except torch.OutOfMemoryError:
                # Memory the caching allocator keeps for other sizes (the reference's float32
                # temporaries of earlier workloads: 37 GiB of an H100's 80 once, when an 8 GiB
                # KV cache came next) is given back to the device, then the set is tried again.
                gc.collect()
                torch.cuda.empty_cache()
                buffer = self._pool_buffer(size)
            return buffer, ("cuda", bytes(ForkingPickler.dumps(buffer)))
        # Named by a count of every file made, chunks and large sets alike: named by the chunk count,
        # a large set (never kept as a chunk) took the name of the next chunk or large set, and
        # the two shared memory.
        path = self.folder / f"buffer{self._files}"
        self._files += 1
        with open(path, "wb") as handle:
            handle.truncate(size)
        buffer = torch.from_file(str(path), shared=True, size=size, dtype=torch.uint8)
        return buffer, ("file", str(path), size)

    def _pool_buffer(self, size: int) -> torch.Tensor:
        assert self._pool is not None
        with torch.cuda.use_mem_pool(self._pool):
            return torch.empty(size, dtype=torch.uint8, device=self.device)

    def close(self) -> None:
        self._chunks.clear()
        shutil.rmtree(self.folder, ignore_errors=True)


def _kept_strides(value: torch.Tensor) -> tuple[int, ...]:
    """The strides a shared copy keeps: the value's own when they cover its storage densely (a
    permuted layout is part of what a solution is given), contiguous ones otherwise."""
    expected = 1
    for size, step in sorted(zip(value.shape, value.stride(), strict=True), key=lambda d: d[1]):
        if size == 1:
            continue
        if step != expected:
            return tuple(torch.empty(value.shape, device="meta").stride())
        expected *= size
    return tuple(value.stride())


def _span(shape: tuple[int, ...] | torch.Size, stride: tuple[int, ...]) -> int:
    """Elements of storage a tensor of this shape and stride reaches."""
    if any(size == 0 for size in shape):
        return 0
    return 1 + sum((size - 1) * step for size, step in zip(shape, stride, strict=True))


def _view(
    buffer: torch.Tensor,
    offset: int,
    dtype: torch.dtype,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
) -> torch.Tensor:
    itemsize = dtype.itemsize
    flat = buffer[offset : offset + _span(shape, stride) * itemsize].view(dtype)
    return flat.as_strided(shape, stride)


def open_chunk(handle: tuple[Any, ...]) -> torch.Tensor:
    """The sandbox's side of a chunk."""
    if handle[0] == "cuda":
        buffer = ForkingPickler.loads(handle[1])
        assert isinstance(buffer, torch.Tensor)
        return buffer
    _, path, size = handle
    return torch.from_file(path, shared=True, size=size, dtype=torch.uint8)


def view_layout(chunks: dict[int, torch.Tensor], layout: Layout) -> list[torch.Tensor]:
    where, places = layout
    buffer = chunks[where] if isinstance(where, int) else open_chunk(where)
    return [_view(buffer, *place) for place in places]
