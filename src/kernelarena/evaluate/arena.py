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

Handle = tuple[Any, ...]


class Arena:
    def __init__(self, device: torch.device, folder: Path | None = None) -> None:
        self.device = device
        self._pool = torch.cuda.MemPool() if device.type == "cuda" else None
        self.folder = folder or Path(tempfile.mkdtemp(prefix="kernelarena-arena-"))
        self._names = itertools.count()
        self._unlinked: list[Path] = []

    def share(self, value: torch.Tensor) -> tuple[torch.Tensor, Handle]:
        """A contiguous copy of ``value`` in shared memory, and the handle a sandbox maps it by."""
        if self._pool is not None:
            with torch.cuda.use_mem_pool(self._pool):
                shared = torch.empty(value.shape, dtype=value.dtype, device=self.device)
            shared.copy_(value)
            return shared, ("cuda", bytes(ForkingPickler.dumps(shared)))
        numel = value.numel()
        if numel == 0:
            return torch.empty(value.shape, dtype=value.dtype), ("empty", value.dtype, value.shape)
        path = self.folder / f"t{next(self._names)}"
        with open(path, "wb") as handle:
            handle.truncate(numel * value.element_size())
        shared = torch.from_file(str(path), shared=True, size=numel, dtype=value.dtype)
        shared = shared.view(value.shape)
        shared.copy_(value)
        self._unlinked.append(path)
        return shared, ("file", str(path), value.dtype, tuple(value.shape), numel)

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


def open_handle(handle: Handle) -> torch.Tensor:
    """The sandbox's side of ``Arena.share``."""
    kind = handle[0]
    if kind == "cuda":
        tensor = ForkingPickler.loads(handle[1])
        assert isinstance(tensor, torch.Tensor)
        return tensor
    if kind == "empty":
        return torch.empty(handle[2], dtype=handle[1])
    _, path, dtype, shape, numel = handle
    return torch.from_file(path, shared=True, size=numel, dtype=dtype).view(shape)
