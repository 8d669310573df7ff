"""Memory the judge owns and a sandbox maps: how tensors cross between them without a host trip.

On a GPU, tensors live in a memory pool of their own (``torch.cuda.MemPool``), so that the CUDA IPC
handle a sandbox opens (which covers a whole allocator segment) reaches only tensors that were handed
to it, never the judge's expected outputs or pristine copies; the handle is torch's own IPC reduction.
On a CPU, each tensor is a file in ``/dev/shm`` that both sides map shared; the judge unlinks it once
the sandbox has mapped it. What the judge keeps private is allocated the ordinary way.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing  # registers the CUDA IPC reductions with ForkingPickler

Handle = tuple[tuple[Any, ...], list[tuple[int, torch.dtype, tuple[int, ...]]]]
# Tensors in a shared buffer start at multiples of this (CUDA's own allocation granularity).
ALIGNMENT = 256


class Arena:
    def __init__(self, device: torch.device, folder: Path | None = None) -> None:
        self.device = device
        self._pool = torch.cuda.MemPool() if device.type == "cuda" else None
        self.folder = folder or Path(tempfile.mkdtemp(prefix="kernelarena-arena-"))
        self._names = itertools.count()
        self._unlinked: list[Path] = []

    def share(self, values: list[torch.Tensor]) -> tuple[list[torch.Tensor], Handle]:
        """Contiguous copies of ``values`` in one shared buffer, and the handle a sandbox maps them
        all by: one IPC handle (or file) per set, not one per tensor, since opening one costs."""
        offsets, total = [], 0
        for value in values:
            offsets.append(total)
            total += -(-value.numel() * value.element_size() // ALIGNMENT) * ALIGNMENT
        buffer = self._buffer(max(total, ALIGNMENT))
        shared = [
            _view(buffer, offset, value.dtype, tuple(value.shape))
            for value, offset in zip(values, offsets, strict=True)
        ]
        for target, value in zip(shared, values, strict=True):
            target.copy_(value)
        layout = [(o, v.dtype, tuple(v.shape)) for o, v in zip(offsets, values, strict=True)]
        return shared, (self._handle(buffer), layout)

    def _buffer(self, size: int) -> torch.Tensor:
        if self._pool is not None:
            with torch.cuda.use_mem_pool(self._pool):
                return torch.empty(size, dtype=torch.uint8, device=self.device)
        path = self.folder / f"t{next(self._names)}"
        with open(path, "wb") as handle:
            handle.truncate(size)
        self._unlinked.append(path)
        return torch.from_file(str(path), shared=True, size=size, dtype=torch.uint8)

    def _handle(self, buffer: torch.Tensor) -> tuple[Any, ...]:
        if self._pool is not None:
            return ("cuda", bytes(ForkingPickler.dumps(buffer)))
        return ("file", str(self._unlinked[-1]), buffer.numel())

    def mapped(self) -> None:
        """The sandbox has mapped every file handed out so far: their names can go."""
        for path in self._unlinked:
            with contextlib.suppress(OSError):
                path.unlink()
        self._unlinked.clear()

    def close(self) -> None:
        self.mapped()
        with contextlib.suppress(OSError):
            self.folder.rmdir()


def _view(
    buffer: torch.Tensor, offset: int, dtype: torch.dtype, shape: tuple[int, ...]
) -> torch.Tensor:
    itemsize = torch.empty(0, dtype=dtype).element_size()
    count = 1
    for size in shape:
        count *= size
    return buffer[offset : offset + count * itemsize].view(dtype).view(shape)


def open_handle(handle: Handle) -> list[torch.Tensor]:
    """The sandbox's side of ``Arena.share``: the tensors of one set."""
    (kind, *where), layout = handle
    if kind == "cuda":
        buffer = ForkingPickler.loads(where[0])
    else:
        path, size = where
        buffer = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
    return [_view(buffer, offset, dtype, shape) for offset, dtype, shape in layout]
