"""The CUDA virtual-memory arena's calls into the driver, checked without a GPU: a stand-in libcuda
made of C callbacks with the same signatures (so ctypes converts every argument as it would for the
real library) records what ``arena_cuda`` asks for. The GPU tests in ``test_arena.py`` run the real
driver."""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from kernelarena.evaluate.sandbox import arena_cuda

GRANULARITY = 2 << 20
EXPORTED_FD = 77


class FakeDriver:
    """libcuda's VMM calls as C callbacks that record what they were given."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.errors: list[str] = []  # what the callbacks' own checks found wrong
        self.live_handles: set[int] = set()
        self.mapped: dict[int, int] = {}  # address -> size
        self.reserved: dict[int, int] = {}
        self.fail_create_with = 0
        self._next = 0x7F0000000000
        self._keep: list[Any] = []
        for name, arguments in arena_cuda._SIGNATURES.items():
            implementation = getattr(self, "_" + name, None) or (lambda *a: 0)
            prototype = ctypes.CFUNCTYPE(ctypes.c_int, *arguments)
            self._keep.append(function := prototype(self._recorded(name, implementation)))
            setattr(self, name, function)

    def _recorded(self, name: str, implementation: Callable[..., int]) -> Callable[..., int]:
        def call(*arguments: Any) -> int:
            self.calls.append((name, *arguments))
            try:
                return implementation(*arguments)
            except Exception as error:  # an exception cannot cross a C callback: kept, and failed
                self.errors.append(f"{name}: {error!r}")
                return 999

        return call

    def names(self) -> list[str]:
        return [c[0] for c in self.calls if c[0] not in ("cuCtxGetCurrent", "cuGetErrorName")]

    def _cuCtxGetCurrent(self, context: Any) -> int:
        context[0] = 1  # a context is current
        return 0

    def _cuMemGetAllocationGranularity(self, granularity: Any, prop: Any, option: int) -> int:
        granularity[0] = GRANULARITY
        return 0

    def _cuMemCreate(self, handle: Any, size: int, prop: Any, flags: int) -> int:
        if self.fail_create_with:
            return self.fail_create_with
        properties = prop.contents
        assert (properties.type, properties.requestedHandleTypes) == (1, 1)
        assert (properties.location.type, properties.location.id) == (1, 0)
        assert size % GRANULARITY == 0
        handle[0] = 1000 + len(self.calls)
        self.live_handles.add(handle[0])
        return 0

    def _cuMemExportToShareableHandle(
        self, shareable: int, handle: int, kind: int, flags: int
    ) -> int:
        assert handle in self.live_handles and kind == 1
        ctypes.cast(shareable, ctypes.POINTER(ctypes.c_int))[0] = EXPORTED_FD
        return 0

    def _cuMemImportFromShareableHandle(self, handle: Any, os_handle: int, kind: int) -> int:
        assert os_handle == EXPORTED_FD and kind == 1  # the descriptor's value, not a pointer
        handle[0] = 5000
        self.live_handles.add(5000)
        return 0

    def _cuMemAddressReserve(self, address: Any, size: int, *rest: int) -> int:
        address[0] = self._next
        self.reserved[self._next] = size
        self._next += 1 << 32
        return 0

    def _cuMemMap(self, address: int, size: int, offset: int, handle: int, flags: int) -> int:
        assert self.reserved[address] == size and handle in self.live_handles and offset == 0
        self.mapped[address] = size
        return 0

    def _cuMemSetAccess(self, address: int, size: int, descriptor: Any, count: int) -> int:
        access = descriptor.contents
        assert (access.location.type, access.location.id, access.flags, count) == (1, 0, 3, 1)
        assert self.mapped[address] == size
        return 0

    def _cuMemUnmap(self, address: int, size: int) -> int:
        assert self.mapped.pop(address) == size
        return 0

    def _cuMemAddressFree(self, address: int, size: int) -> int:
        assert self.reserved.pop(address) == size
        return 0

    def _cuMemRelease(self, handle: int) -> int:
        self.live_handles.remove(handle)
        return 0

    def _cuGetErrorName(self, code: int, name: Any) -> int:
        return 0


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDriver]:
    driver = FakeDriver()
    monkeypatch.setattr(arena_cuda, "_driver", driver)
    monkeypatch.setattr(arena_cuda, "_granularities", {})
    monkeypatch.setattr(arena_cuda, "_pending", [])
    # No GPU here: the mapping's memory is stood in for by a CPU tensor, and there is no device
    # to synchronize.
    monkeypatch.setattr(arena_cuda.Mapping, "tensor", lambda self: _owned_by(self))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    yield driver
    assert not driver.errors


def _owned_by(mapping: arena_cuda.Mapping) -> torch.Tensor:
    """A tensor that keeps ``mapping`` alive as a CUDA array interface tensor does."""
    tensor = torch.zeros(1, dtype=torch.uint8)
    tensor.owner = mapping  # type: ignore[attr-defined]
    return tensor


CUDA = torch.device("cuda", 0)


def test_a_buffer_is_created_exported_mapped_and_its_handle_released(fake: FakeDriver) -> None:
    tensor, fd = arena_cuda.create(CUDA, 3 << 20)
    assert fd == EXPORTED_FD
    assert fake.names() == [
        "cuMemGetAllocationGranularity",
        "cuMemCreate",
        "cuMemExportToShareableHandle",
        "cuMemAddressReserve",
        "cuMemMap",
        "cuMemSetAccess",
        "cuMemRelease",  # the mapping and the exported descriptor keep the memory
    ]
    create = next(c for c in fake.calls if c[0] == "cuMemCreate")
    assert create[2] == 4 << 20  # rounded up to the granularity
    assert not fake.live_handles and len(fake.mapped) == 1
    del tensor
    gc.collect()
    assert len(fake.mapped) == 1  # not unmapped where the last tensor went
    arena_cuda.release_pending(CUDA)
    assert not fake.mapped and not fake.reserved


def test_the_sandbox_imports_the_descriptor_and_maps_the_same_size(fake: FakeDriver) -> None:
    tensor = arena_cuda.open_shared(CUDA, EXPORTED_FD, 4 << 20)
    assert fake.names() == [
        "cuMemImportFromShareableHandle",
        "cuMemAddressReserve",
        "cuMemMap",
        "cuMemSetAccess",
        "cuMemRelease",
    ]
    mapping = tensor.owner  # type: ignore[attr-defined]
    assert mapping.size == 4 << 20
    del tensor, mapping
    gc.collect()
    arena_cuda.release_pending(CUDA)
    assert not fake.mapped and not fake.reserved


def test_out_of_device_memory_is_torchs_out_of_memory_error(fake: FakeDriver) -> None:
    fake.fail_create_with = 2  # CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(torch.OutOfMemoryError, match="cuMemCreate"):
        arena_cuda.create(CUDA, 1 << 20)
    fake.fail_create_with = 1  # CUDA_ERROR_INVALID_VALUE
    with pytest.raises(arena_cuda.DriverError, match=r"cuMemCreate failed: .*\(1\)"):
        arena_cuda.create(CUDA, 1 << 20)


def test_nothing_is_released_while_a_graph_is_captured(
    fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    tensor, _ = arena_cuda.create(CUDA, 1 << 20)
    del tensor
    gc.collect()
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    arena_cuda.release_pending(CUDA)
    assert len(fake.mapped) == 1
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    arena_cuda.release_pending(CUDA)
    assert not fake.mapped
