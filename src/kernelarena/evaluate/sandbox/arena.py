"""Memory the judge owns and a sandbox maps: how tensors cross between them without a copy.

Every buffer is anonymous memory handed to the sandbox as a file descriptor over its connection (a
socket pair, ``SCM_RIGHTS``): on a CPU a memfd, on a GPU CUDA virtual memory exported as a descriptor
(``arena_cuda``). Nothing is named, neither a file in /dev/shm nor a handle the driver resolves through
a pid, so it works across the user, PID, mount and network namespaces a sandbox runs in, and no
process reaches it unless it was given the descriptor or forked from one that was. Each buffer holds
only what is handed to the sandbox; the judge's expected outputs and pristine copies are allocated
the ordinary way.

A memfd is sealed against shrinking and growing before it is handed over: a sandbox that truncated
its descriptor would otherwise turn the judge's next access to the mapping into a SIGBUS.

Buffers belong to one sandbox (``hand_to``). When the judge hands sets to another one (the next
solution, or a replacement), the last one's buffers are dropped and new ones made, so nothing an
earlier sandbox started (a process that outlived its kill with the mapping) can write memory a later
solution is given or judged on: the judge no longer reads that memory.

Where CUDA cannot export memory as a descriptor (``arena_cuda.vmm_unavailable`` says why), the GPU
falls back to a ``torch.cuda.MemPool`` of the judge's whose buffers go to the sandbox as legacy CUDA
IPC handles, which the driver resolves through the judge's pid: that fails across PID namespaces,
and the pool's memory is reused for the next sandbox's buffers, so a process that outlived its
sandbox with an IPC mapping could reach them. ``Arena.sharing`` says which holds.
"""

from __future__ import annotations

import fcntl
import gc
import itertools
import mmap
import os
import tempfile
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing  # registers the CUDA IPC reductions with ForkingPickler

from kernelarena.evaluate.sandbox import arena_cuda

# (buffer id, [(offset, dtype, shape, stride)]): where a set's tensors sit.
Layout = tuple[int, list[tuple[int, torch.dtype, tuple[int, ...], tuple[int, ...]]]]
# Tensors start at multiples of this (CUDA's own allocation granularity).
ALIGNMENT = 256
CHUNK_BYTES = {"cuda": 256 << 20, "cpu": 16 << 20}


@dataclass
class Handoff:
    """A buffer its sandbox has not mapped yet: how to map it, and the descriptor that goes beside
    the request (-1 for a legacy CUDA IPC handle, which travels in the request itself)."""

    id: int
    kind: str  # "memfd", "file" (no memfd here), "cuda_vmm" or "cuda_ipc"
    size: int
    kept: bool  # a chunk the sandbox keeps for later sets; else one large set's own buffer
    fd: int = -1
    ipc: bytes = b""

    def description(self) -> tuple[str, int, bool, bytes]:
        return self.kind, self.size, self.kept, self.ipc

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Arena:
    """Chunks of shared memory, each handed to one sandbox once, from which each job's input sets
    are carved in order and which that sandbox's next job reuses."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.sharing, self._kind = _sharing(device)
        self._pool = torch.cuda.MemPool() if self._kind == "cuda_ipc" else None
        self._ids = itertools.count()
        self._chunks: list[tuple[int, torch.Tensor]] = []
        self._unsent: list[Handoff] = []
        self._owner: object | None = None
        self._chunk = 0
        self._offset = 0

    def hand_to(self, owner: object | None) -> None:
        """Sets carved from now on go to ``owner`` (a sandbox). Another owner than the last gets
        buffers of its own: the last one's are dropped (None: whoever comes next gets new ones)."""
        if owner is not self._owner:
            self._drop()
            self._owner = owner

    def take_unsent(self) -> list[Handoff]:
        """The buffers made since the last call, for the caller to send to the owner and close."""
        taken, self._unsent = self._unsent, []
        return taken

    def share(self, values: list[torch.Tensor]) -> tuple[list[torch.Tensor], Layout]:
        """Contiguous copies of ``values`` side by side in a buffer, and where they sit."""
        places = [(v.dtype, tuple(v.shape), _kept_strides(v)) for v in values]
        shared, layout = self.carve(places)
        for target, value in zip(shared, values, strict=True):
            target.copy_(value)
        return shared, layout

    def carve(
        self, places: list[tuple[torch.dtype, tuple[int, ...], tuple[int, ...]]]
    ) -> tuple[list[torch.Tensor], Layout]:
        """Room for tensors of these (dtype, shape, stride) side by side in a buffer, unwritten,
        and where they sit."""
        self._release_pending()
        offsets, total = [], 0
        for dtype, shape, stride in places:
            offsets.append(total)
            total += -(-_span(shape, stride) * dtype.itemsize // ALIGNMENT) * ALIGNMENT
        if total > CHUNK_BYTES[self.device.type]:
            # A set larger than a chunk gets a buffer of its own, freed with the set: kept as a
            # chunk, sets of a few GiB would pile up across jobs (an 8 GiB KV cache does).
            where, buffer = self._new_buffer(total, kept=False)
            start = 0
        else:
            where, start, buffer = self._allocate(max(total, ALIGNMENT))
        layout = [(start + o, *place) for o, place in zip(offsets, places, strict=True)]
        return [_view(buffer, *place) for place in layout], (where, layout)

    def mark(self) -> tuple[int, int]:
        return self._chunk, self._offset

    def rewind(self, mark: tuple[int, int]) -> None:
        """Sets carved since ``mark`` are forgotten: their room is reused."""
        self._chunk, self._offset = mark

    def reset(self) -> None:
        """Every set carved so far is forgotten: the next ones reuse the chunks from the start."""
        self._chunk, self._offset = 0, 0

    def close(self) -> None:
        self._drop()
        self._owner = None

    def _drop(self) -> None:
        for handoff in self._unsent:
            handoff.close()
        self._unsent, self._chunks = [], []
        self.reset()
        self._release_pending()

    def _allocate(self, size: int) -> tuple[int, int, torch.Tensor]:
        """(chunk id, offset, chunk) of ``size`` free bytes, in a new chunk if none has room."""
        while self._chunk < len(self._chunks):
            chunk_id, chunk = self._chunks[self._chunk]
            if self._offset + size <= chunk.numel():
                start = self._offset
                self._offset += size
                return chunk_id, start, chunk
            self._chunk, self._offset = self._chunk + 1, 0
        chunk_id, chunk = self._new_buffer(max(size, CHUNK_BYTES[self.device.type]), kept=True)
        self._chunks.append((chunk_id, chunk))
        self._chunk, self._offset = len(self._chunks) - 1, size
        return chunk_id, 0, chunk

    def _new_buffer(self, size: int, kept: bool) -> tuple[int, torch.Tensor]:
        try:
            buffer, handoff = self._make(size, kept)
        except torch.OutOfMemoryError:
            # Memory the caching allocator keeps for other sizes (the reference's float32
            # temporaries of earlier workloads: 37 GiB of an H100's 80 once, when an 8 GiB KV
            # cache came next) is given back to the device, then the set is tried again.
            gc.collect()
            self._release_pending()
            torch.cuda.empty_cache()
            buffer, handoff = self._make(size, kept)
        self._unsent.append(handoff)
        return handoff.id, buffer

    def _make(self, size: int, kept: bool) -> tuple[torch.Tensor, Handoff]:
        handoff = Handoff(next(self._ids), self._kind, size, kept)
        if self._kind == "cuda_vmm":
            buffer, handoff.fd = arena_cuda.create(self.device, size)
            handoff.size = buffer.numel()
        elif self._kind == "cuda_ipc":
            assert self._pool is not None
            with torch.cuda.use_mem_pool(self._pool):
                buffer = torch.empty(size, dtype=torch.uint8, device=self.device)
            handoff.ipc = bytes(ForkingPickler.dumps(buffer))
        else:
            buffer, handoff.fd = _anonymous_file(size, sealed=self._kind == "memfd")
        return buffer, handoff

    def _release_pending(self) -> None:
        if self._kind == "cuda_vmm":
            arena_cuda.release_pending(self.device)


def _sharing(device: torch.device) -> tuple[str, str]:
    """How buffers reach a sandbox on ``device``: a sentence for logs, and the kind of buffer."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        reason = arena_cuda.vmm_unavailable(index)
        if os.environ.get("KERNELARENA_ARENA") == "ipc":  # a diagnostic, without namespaces
            reason = "KERNELARENA_ARENA=ipc"
        if reason is None:
            return "CUDA virtual memory passed by file descriptor", "cuda_vmm"
        return (
            f"legacy CUDA IPC handles of a memory pool ({reason}); they do not cross PID "
            "namespaces",
            "cuda_ipc",
        )
    if hasattr(os, "memfd_create"):
        return "sealed memfds passed by file descriptor", "memfd"
    return "unlinked temporary files passed by file descriptor (no memfd here: unsealed)", "file"


def _anonymous_file(size: int, sealed: bool) -> tuple[torch.Tensor, int]:
    """``size`` bytes of shared memory with no name, mapped here, and its descriptor."""
    if sealed:
        fd = os.memfd_create("kernelarena-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    else:
        with tempfile.TemporaryFile() as handle:
            fd = os.dup(handle.fileno())
    try:
        os.ftruncate(fd, size)
        if sealed:
            seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        return _map_file(fd, size), fd
    except BaseException:
        os.close(fd)
        raise


def _map_file(fd: int, size: int) -> torch.Tensor:
    """The file behind ``fd`` mapped shared, as uint8; the mapping lives as long as the tensor."""
    memory = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    return torch.frombuffer(memory, dtype=torch.uint8)


def open_buffers(
    device: torch.device, described: dict[int, tuple[str, int, bool, bytes]], fds: list[int]
) -> dict[int, tuple[torch.Tensor, bool]]:
    """The sandbox's side of new buffers: each mapped here, with whether it is a kept chunk. The
    descriptors (in the order of ``described``, one per buffer that has one) are closed."""
    opened: dict[int, tuple[torch.Tensor, bool]] = {}
    remaining = iter(fds)
    try:
        for buffer_id, (kind, size, kept, ipc) in described.items():
            if kind == "cuda_ipc":
                buffer = ForkingPickler.loads(ipc)
                assert isinstance(buffer, torch.Tensor)
            else:
                fd = next(remaining)
                try:
                    if kind == "cuda_vmm":
                        buffer = arena_cuda.open_shared(device, fd, size)
                    else:
                        buffer = _map_file(fd, size)
                finally:
                    os.close(fd)  # the mapping holds the memory
            opened[buffer_id] = (buffer, kept)
    finally:
        for fd in remaining:
            os.close(fd)
    return opened


def release_unused(device: torch.device) -> None:
    """The sandbox's side of ``Arena._release_pending``: buffers of sets it forgot."""
    if device.type == "cuda":
        arena_cuda.release_pending(device)
        give_back_cached(device)


# Freed device memory a process's allocator may keep once its sets are gone; past it, it goes back.
CACHED_KEPT_BYTES = 4 << 30


def give_back_cached(device: torch.device) -> None:
    """Once a job's sets are forgotten (the judge's, the solution's): the device memory this
    process freed goes back to the device, past ``CACHED_KEPT_BYTES``, for the other processes of
    the GPU (the reference's, the next solution's), which cannot take it from this one's cache."""
    if device.type != "cuda":
        return
    if torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device) > CACHED_KEPT_BYTES:
        torch.cuda.empty_cache()


def _kept_strides(value: torch.Tensor) -> tuple[int, ...]:
    return kept_strides(tuple(value.shape), tuple(value.stride()))


def kept_strides(shape: tuple[int, ...], stride: tuple[int, ...]) -> tuple[int, ...]:
    """The strides a shared copy keeps: the value's own when they cover its storage densely (a
    permuted layout is part of what a solution is given), contiguous ones otherwise."""
    expected = 1
    for size, step in sorted(zip(shape, stride, strict=True), key=lambda d: d[1]):
        if size == 1:
            continue
        if step != expected:
            return tuple(torch.empty(shape, device="meta").stride())
        expected *= size
    return tuple(stride)


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


def view_layout(buffers: dict[int, torch.Tensor], layout: Layout) -> list[torch.Tensor]:
    where, places = layout
    return [_view(buffers[where], *place) for place in places]
