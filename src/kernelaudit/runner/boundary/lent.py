"""Device memory the auditor lends a GPU worker for its calls' buffers, and reads back itself.

The auditor creates a physical allocation with CUDA's virtual memory management, maps it into
its own address space, and exports it as a file descriptor, which it hands to the worker over
a socket of their own (`send`, `receive`); the worker maps the same memory (`Lent.mapped`).
Nothing but that descriptor opens it: no name in /dev/shm, no handle another process could
guess, no user id the two must share, so the worker keeps its sandbox as it is. The worker lays
its calls' guarded buffers out in it (`runner.boundary.arena`), and the auditor reads the bands, the
inputs and the slots there through its own mapping (`runner.auditor.observed`), as it reads a CPU
arena in the shared region.

The driver calls come from NVIDIA's Python bindings (`cuda.bindings`, which torch's CUDA
wheels install); where they are missing, or the device cannot export memory this way,
`unavailable` says why and GPU calls keep buffers of the worker's own.
"""

from __future__ import annotations

import functools
import os
import socket
import struct
from dataclasses import replace
from typing import Any

import torch

from kernelaudit.runner.boundary.arena import arena_bytes
from kernelaudit.runner.boundary.messages import Invocation

OBSERVED_BY_THE_WORKER = "the calls' device memory observed by the worker alone"
"""What an audit's report says where no memory could be lent (`unavailable` says why)."""

_HEADER = struct.Struct("<QQ")
"""What travels with a lent descriptor: its serial number and its size in bytes."""


@functools.cache
def _driver() -> Any:
    # imported on a GPU only, and only where installed
    from cuda.bindings import driver

    return driver


@functools.cache
def unavailable(device: torch.device) -> str:
    """Why memory cannot be lent on `device` ("" when it can)."""
    if device.type != "cuda":
        return "not a CUDA device"
    try:
        driver = _driver()
    except ImportError:
        return "NVIDIA's Python bindings (cuda-bindings) are not installed"
    try:
        ordinal = _context(device)
        attribute = driver.CUdevice_attribute
        for needed in (
            attribute.CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            attribute.CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
        ):
            if not _check(driver.cuDeviceGetAttribute(needed, ordinal)):
                return f"the device does not support {needed.name}"
    except (RuntimeError, AttributeError) as error:
        return str(error)
    return ""


KEPT_BYTES = 1 << 30
"""A block larger than this is given up by both sides after the invocation that used it, so
the auditor's own work (truths of large cases) has the device's memory between
invocations; smaller ones are kept for the next invocation."""


def lent_most_bytes(device: torch.device) -> int:
    """The most device memory lent to a worker for its calls' buffers: an eighth of the
    device's memory, and half of what is free on it now. An invocation whose buffers need
    more keeps them in the worker's own memory, where only the worker's own observations
    see them."""
    free, total = torch.cuda.mem_get_info(device)
    return min(total // 8, free // 2)


class Lent:
    """One block of lent device memory, mapped in this process: `tensor` is all of it, as
    uint8. `size` and `bytes_at` are what an arena reads a region through."""

    def __init__(self, device: torch.device, handle: Any, size: int, fd: int, serial: int) -> None:
        self.device = device
        self.size = size
        self.fd = fd
        """The exported descriptor (the auditor's, to send; -1 once closed)."""
        self.serial = serial
        self._handle = handle
        self._pointer = 0
        self.tensor = self._map()

    @classmethod
    def create(cls, device: torch.device, nbytes: int, serial: int) -> Lent:
        """New device memory of at least `nbytes` (whole granules), mapped here and exported."""
        driver = _driver()
        ordinal = _context(device)
        properties = _properties(driver, ordinal)
        granule = _check(
            driver.cuMemGetAllocationGranularity(
                properties,
                driver.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            )
        )
        size = -(-max(nbytes, 1) // granule) * granule
        handle = _check(driver.cuMemCreate(size, properties, 0))
        try:
            fd = _check(driver.cuMemExportToShareableHandle(handle, _fd_handle(driver), 0))
        except BaseException:
            driver.cuMemRelease(handle)
            raise
        return cls(device, handle, size, int(fd), serial)

    @classmethod
    def mapped(cls, device: torch.device, fd: int, size: int, serial: int) -> Lent:
        """The memory behind a received descriptor, mapped here (the descriptor is closed)."""
        driver = _driver()
        _context(device)
        try:
            handle = _check(driver.cuMemImportFromShareableHandle(fd, _fd_handle(driver)))
        finally:
            os.close(fd)
        return cls(device, handle, size, -1, serial)

    def bytes_at(self, offset: int, count: int) -> torch.Tensor:
        """Bytes `offset` to `offset + count` as a uint8 tensor of their own (no copy; its
        storage starts there, as an allocation's would); ValueError when they are not all
        inside the block."""
        if offset < 0 or count <= 0 or offset + count > self.size or not self._pointer:
            raise ValueError(
                f"{count:,} bytes at offset {offset:,} are not inside the lent block's "
                f"{self.size:,} bytes"
            )
        return torch.as_tensor(_Interface(self._pointer + offset, count), device=self.device)

    def close(self) -> None:
        """Unmap it here and give up this process's hold on it (the memory goes once the
        other side has given up its own). Tensors over it must be gone."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if not self._pointer:
            return
        driver = _driver()
        _context(self.device)
        torch.cuda.synchronize(self.device)
        self.tensor = torch.empty(0, dtype=torch.uint8, device=self.device)
        driver.cuMemUnmap(self._pointer, self.size)
        driver.cuMemAddressFree(self._pointer, self.size)
        driver.cuMemRelease(self._handle)
        self._pointer = 0

    def _map(self) -> torch.Tensor:
        driver = _driver()
        ordinal = _context(self.device)
        pointer = _check(driver.cuMemAddressReserve(self.size, 0, 0, 0))
        try:
            _check(driver.cuMemMap(pointer, self.size, 0, self._handle, 0))
            access = driver.CUmemAccessDesc()
            access.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = ordinal
            access.flags = driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            _check(driver.cuMemSetAccess(pointer, self.size, [access], 1))
        except BaseException:
            driver.cuMemUnmap(pointer, self.size)
            driver.cuMemAddressFree(pointer, self.size)
            driver.cuMemRelease(self._handle)
            raise
        self._pointer = int(pointer)
        return torch.as_tensor(_Interface(self._pointer, self.size), device=self.device)


class Lender:
    """The auditor's side: the device memory lent to one worker through `channel`, replaced
    by a larger block when an invocation needs more."""

    def __init__(self, channel: socket.socket, device: torch.device) -> None:
        self.channel = channel
        self.device = device
        self.block: Lent | None = None
        """The block lent now (the worker is handed it before the invocation naming it)."""
        self._serial = 0

    @property
    def size(self) -> int:
        return self.block.size if self.block is not None else 0

    def lend(self, invocation: Invocation) -> Invocation:
        """`invocation` with its arena in lent memory, where this device can lend memory and
        the arena fits within `lent_most_bytes`; unchanged (its calls' buffers the worker's
        own) otherwise."""
        if unavailable(self.device):
            return invocation
        size = arena_bytes(invocation.calls)
        most = lent_most_bytes(self.device)
        if not 0 < size <= most:
            return invocation
        if self.block is None or self.block.size < size:
            wanted = min(most, max(size, self.size * 3 // 2))
            try:
                grown = Lent.create(self.device, wanted, self._serial + 1)
            except (RuntimeError, torch.OutOfMemoryError):
                return invocation  # no room on the device now: the worker's own buffers
            try:
                send(self.channel, grown)
            except OSError:  # a worker that stopped taking what it is lent
                grown.close()
                return invocation
            if self.block is not None:
                self.block.close()
            self.block, self._serial = grown, grown.serial
        return replace(invocation, arena=(0, size), lent=self.block.serial)

    def done(self) -> None:
        """The invocation that used the block is over: a block past `KEPT_BYTES` is given up
        (the worker gives up its own hold on it too)."""
        if self.block is not None and self.block.size > KEPT_BYTES:
            self.block.close()
            self.block = None

    def close(self) -> None:
        self.channel.close()
        if self.block is not None:
            self.block.close()
            self.block = None


def send(channel: socket.socket, lent: Lent) -> None:
    """Hand `lent`'s descriptor to the other end of `channel` (the auditor's side)."""
    socket.send_fds(channel, [_HEADER.pack(lent.serial, lent.size)], [lent.fd])


def receive(channel: socket.socket, device: torch.device, serial: int) -> Lent:
    """The block numbered `serial`, mapped here: descriptors sent before it are taken and
    closed on the way (the worker's side). Raises OSError when the channel does not hold it."""
    while True:
        data, fds, _, _ = socket.recv_fds(channel, _HEADER.size, 1)
        if len(data) != _HEADER.size or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError("the auditor's channel of lent memory closed or sent garbage")
        number, size = _HEADER.unpack(data)
        if number == serial:
            return Lent.mapped(device, fds[0], size, serial)
        os.close(fds[0])


class _Interface:
    """Raw device memory as torch takes it (`__cuda_array_interface__`, with no stream to
    wait on: the memory is new or the other side is done with it)."""

    def __init__(self, pointer: int, size: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (size,),
            "typestr": "|u1",
            "data": (pointer, False),
            "version": 3,
        }


def _fd_handle(driver: Any) -> Any:
    return driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


def _properties(driver: Any, ordinal: int) -> Any:
    properties = driver.CUmemAllocationProp()
    properties.type = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    properties.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    properties.location.id = ordinal
    properties.requestedHandleTypes = _fd_handle(driver)
    return properties


def _context(device: torch.device) -> int:
    """Make torch's context on `device` current in this thread (the driver calls act on the
    current one); its ordinal."""
    ordinal = device.index if device.index is not None else torch.cuda.current_device()
    with torch.cuda.device(ordinal):
        torch.cuda.init()
        torch.cuda.current_stream().query()  # the primary context exists and is current
    driver = _driver()
    context = _check(driver.cuDevicePrimaryCtxRetain(ordinal))
    _check(driver.cuCtxSetCurrent(context))
    driver.cuDevicePrimaryCtxRelease(ordinal)
    return ordinal


def _check(returned: Any) -> Any:
    """The value of a driver call's (status, value...) tuple; RuntimeError for a failure."""
    status, *values = returned if isinstance(returned, tuple) else (returned,)
    driver = _driver()
    if status != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(status)
        raise RuntimeError(f"CUDA driver call failed: {name.decode() if name else status}")
    return values[0] if len(values) == 1 else tuple(values) or None
