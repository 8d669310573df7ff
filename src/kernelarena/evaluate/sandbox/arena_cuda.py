"""GPU memory the judge shares with a sandbox: CUDA virtual memory exported as a file descriptor.

The judge makes each buffer with ``cuMemCreate`` (requesting POSIX file descriptor export), maps it in
its own address space and wraps it as a torch tensor; ``cuMemExportToShareableHandle`` turns it into a
descriptor that travels to the sandbox over its socket (``SCM_RIGHTS``), where
``cuMemImportFromShareableHandle`` and a mapping of its own give the sandbox the same memory. Unlike
CUDA's legacy IPC handles, which the driver resolves through the exporting process's pid and so fail
across PID namespaces, a descriptor works in whatever namespaces the sandbox runs, reaches exactly one
buffer (not a whole allocator segment), and is held by no name another process could open.

Called through ctypes on ``libcuda.so.1``, which every CUDA machine has: cuda-python's bindings
would do the same calls, but are not a dependency of torch's wheels. Signatures and constants are
those of ``cuda.h`` (CUDA 11.0 onwards; the structures have not changed since).

A mapping is released when the last tensor on it goes (its owner object is what the tensors keep
alive), but not at once: unmapping memory with work still queued on it faults, and a device-wide
synchronization is not allowed while a graph is being captured. Released mappings wait in a list
that ``release_pending`` empties at moments the caller knows to be safe.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

import torch

_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
_POSIX_FILE_DESCRIPTOR = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_LOCATION_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_READ_WRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_GRANULARITY_RECOMMENDED = 1  # CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
_ATTRIBUTE_VMM = 102  # CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
_ATTRIBUTE_POSIX_FD = 103  # CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
_OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY

_u64 = ctypes.c_uint64
_size = ctypes.c_size_t


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp: 32 bytes
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_SIGNATURES: dict[str, list[Any]] = {
    "cuInit": [ctypes.c_uint],
    "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
    "cuDeviceGetAttribute": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
    "cuCtxGetCurrent": [ctypes.POINTER(ctypes.c_void_p)],
    "cuCtxSetCurrent": [ctypes.c_void_p],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    "cuMemGetAllocationGranularity": [
        ctypes.POINTER(_size),
        ctypes.POINTER(_AllocationProp),
        ctypes.c_int,
    ],
    "cuMemCreate": [ctypes.POINTER(_u64), _size, ctypes.POINTER(_AllocationProp), _u64],
    "cuMemExportToShareableHandle": [ctypes.c_void_p, _u64, ctypes.c_int, _u64],
    # For a POSIX descriptor the "OS handle" is the descriptor's value itself, not a pointer to it.
    "cuMemImportFromShareableHandle": [ctypes.POINTER(_u64), ctypes.c_void_p, ctypes.c_int],
    "cuMemAddressReserve": [ctypes.POINTER(_u64), _size, _size, _u64, _u64],
    "cuMemMap": [_u64, _size, _size, _u64, _u64],
    "cuMemSetAccess": [_u64, _size, ctypes.POINTER(_AccessDesc), _size],
    "cuMemUnmap": [_u64, _size],
    "cuMemAddressFree": [_u64, _size],
    "cuMemRelease": [_u64],
}


class DriverError(RuntimeError):
    def __init__(self, call: str, code: int, name: str) -> None:
        super().__init__(f"{call} failed: {name} ({code})")
        self.code = code


_driver: Any = None  # libcuda once loaded and initialised
_driver_lock = threading.Lock()


def driver() -> Any:
    """libcuda, its VMM functions typed, initialised."""
    global _driver
    with _driver_lock:
        if _driver is None:
            library = ctypes.CDLL("libcuda.so.1")
            for name, arguments in _SIGNATURES.items():
                function = getattr(library, name)
                function.argtypes = arguments
                function.restype = ctypes.c_int
            _check("cuInit", library.cuInit(0), library)
            _driver = library
        return _driver


def _check(call: str, code: int, library: Any = None) -> None:
    if code == 0:
        return
    name = ctypes.c_char_p()
    library = library if library is not None else _driver
    if library is not None:
        library.cuGetErrorName(code, ctypes.byref(name))
    text = name.value.decode() if name.value else "unknown error"
    if code == _OUT_OF_MEMORY:
        raise torch.OutOfMemoryError(f"{call}: CUDA out of memory ({text})")
    raise DriverError(call, code, text)


def _device_handle(index: int) -> int:
    device = ctypes.c_int()
    _check("cuDeviceGet", driver().cuDeviceGet(ctypes.byref(device), index))
    return device.value


def vmm_unavailable(index: int) -> str | None:
    """Why device ``index`` cannot share memory by file descriptor, or None when it can."""
    try:
        cuda, device = driver(), _device_handle(index)
        for attribute, what in (
            (_ATTRIBUTE_VMM, "virtual memory management"),
            (_ATTRIBUTE_POSIX_FD, "export of memory as a POSIX file descriptor"),
        ):
            value = ctypes.c_int()
            _check(
                "cuDeviceGetAttribute",
                cuda.cuDeviceGetAttribute(ctypes.byref(value), attribute, device),
            )
            if value.value != 1:
                return f"the device does not support {what}"
    except (OSError, DriverError) as error:
        return f"the CUDA driver cannot be used through libcuda.so.1: {error}"
    return None


def _ensure_context(index: int) -> None:
    """The device's primary context current on this thread (torch's runtime calls make it so on
    the threads torch used; the driver API needs it explicitly on any other)."""
    cuda, current = driver(), ctypes.c_void_p()
    _check("cuCtxGetCurrent", cuda.cuCtxGetCurrent(ctypes.byref(current)))
    if current.value is None:
        _check(
            "cuDevicePrimaryCtxRetain",
            cuda.cuDevicePrimaryCtxRetain(ctypes.byref(current), _device_handle(index)),
        )
        _check("cuCtxSetCurrent", cuda.cuCtxSetCurrent(current))


def _properties(index: int) -> _AllocationProp:
    properties = _AllocationProp()
    properties.type = _PINNED
    properties.requestedHandleTypes = _POSIX_FILE_DESCRIPTOR
    properties.location.type = _LOCATION_DEVICE
    properties.location.id = index
    return properties


_granularities: dict[int, int] = {}


def rounded_size(index: int, size: int) -> int:
    """``size`` rounded up to the device's recommended allocation granularity (2 MiB on
    Hopper): what ``cuMemCreate`` and ``cuMemMap`` accept."""
    if index not in _granularities:
        queried = _size()
        _check(
            "cuMemGetAllocationGranularity",
            driver().cuMemGetAllocationGranularity(
                ctypes.byref(queried),
                ctypes.byref(_properties(index)),
                _GRANULARITY_RECOMMENDED,
            ),
        )
        _granularities[index] = int(queried.value)
    granularity = _granularities[index]
    return max(1, -(-size // granularity)) * granularity


_pending: list[tuple[int, int]] = []  # (address, size) of mappings no tensor uses any more
_pending_lock = threading.Lock()
_mapped: dict[int, int] = {}  # address -> size of every range this process has mapped


def mapped_bytes() -> int:
    """Bytes of shared buffers this process has mapped and not yet unmapped (its own share of the
    device's memory, which other processes' use does not blur)."""
    with _pending_lock:
        return sum(_mapped.values())


def _unmap_range(address: int, size: int) -> None:
    driver().cuMemUnmap(address, size)
    driver().cuMemAddressFree(address, size)
    with _pending_lock:
        _mapped.pop(address, None)


class Mapping:
    """One buffer mapped in this process; the owner the tensors on it keep alive. Its address range
    goes back to the driver through ``release_pending`` once no tensor uses it."""

    def __init__(self, index: int, size: int, handle: int) -> None:
        self.index, self.size, self.address = index, size, 0
        cuda = driver()
        try:
            address = _u64()
            _check(
                "cuMemAddressReserve",
                cuda.cuMemAddressReserve(ctypes.byref(address), size, 0, 0, 0),
            )
            self.address = int(address.value)
            _check("cuMemMap", cuda.cuMemMap(self.address, size, 0, handle, 0))
            with _pending_lock:
                _mapped[self.address] = size
            access = _AccessDesc()
            access.location.type = _LOCATION_DEVICE
            access.location.id = index
            access.flags = _READ_WRITE
            _check(
                "cuMemSetAccess", cuda.cuMemSetAccess(self.address, size, ctypes.byref(access), 1)
            )
        except BaseException:
            self._unmap()
            raise
        # The memory stays while it is mapped (or exported): the allocation handle is not needed.
        cuda.cuMemRelease(handle)
        self.__cuda_array_interface__ = {
            "shape": (size,),
            "typestr": "|u1",
            "data": (self.address, False),
            "strides": None,
            "version": 2,
        }

    def _unmap(self) -> None:
        if self.address:
            _unmap_range(self.address, self.size)
            self.address = 0

    def __del__(self) -> None:
        # Called from wherever the last tensor went (a graph capture, another thread): only noted.
        if self.address:
            with _pending_lock:
                _pending.append((self.address, self.size))
            self.address = 0

    def tensor(self) -> torch.Tensor:
        """The whole buffer as uint8, sharing this memory (never a copy)."""
        address = self.address
        tensor = torch.as_tensor(self)
        if tensor.data_ptr() != address or tensor.device != torch.device("cuda", self.index):
            raise RuntimeError("torch copied a shared CUDA buffer instead of wrapping it")
        return tensor


def release_pending(device: torch.device) -> None:
    """Unmap the buffers no tensor uses any more, once the device has finished its work on them;
    not while this thread captures a graph (a synchronization would break the capture)."""
    with _pending_lock:
        if not _pending or torch.cuda.is_current_stream_capturing():
            return
        released, _pending[:] = list(_pending), []
    torch.cuda.synchronize(device)
    for address, size in released:
        _unmap_range(address, size)


def create(device: torch.device, size: int) -> tuple[torch.Tensor, int]:
    """A new buffer of at least ``size`` bytes on ``device``, as a uint8 tensor here, and a file
    descriptor that lets another process map it (the caller closes it once it is sent)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    _ensure_context(index)
    size = rounded_size(index, size)
    cuda, handle = driver(), _u64()
    _check(
        "cuMemCreate",
        cuda.cuMemCreate(ctypes.byref(handle), size, ctypes.byref(_properties(index)), 0),
    )
    fd = ctypes.c_int(-1)
    try:
        _check(
            "cuMemExportToShareableHandle",
            cuda.cuMemExportToShareableHandle(
                ctypes.byref(fd), handle.value, _POSIX_FILE_DESCRIPTOR, 0
            ),
        )
        mapping = Mapping(index, size, handle.value)
    except BaseException:
        if fd.value >= 0:
            os.close(fd.value)
        cuda.cuMemRelease(handle.value)
        raise
    return mapping.tensor(), fd.value


def open_shared(device: torch.device, fd: int, size: int) -> torch.Tensor:
    """The sandbox's side: the buffer behind ``fd`` (``size`` bytes, as ``create`` made it)
    mapped here. The descriptor is not needed afterwards; the caller closes it."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    _ensure_context(index)
    handle = _u64()
    _check(
        "cuMemImportFromShareableHandle",
        driver().cuMemImportFromShareableHandle(
            ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FILE_DESCRIPTOR
        ),
    )
    try:
        mapping = Mapping(index, size, handle.value)
    except BaseException:
        driver().cuMemRelease(handle.value)
        raise
    return mapping.tensor()
