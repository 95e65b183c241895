"""Shared memory between the auditor and a candidate's process, for tensors too large to
stream through a pipe at every call.

A region is an anonymous memory file (`memfd_create`) both processes map: the auditor creates
it and passes the descriptor to the child when it starts it. Tensors go in at 64-byte aligned
offsets; a message names them by a `SharedTensor` (offset, dtype, shape) instead of carrying
their bytes. A copy straight from the GPU into the region, and from the region onto the GPU
on the other side, replaces the copy to fresh host memory, the pipe's two copies and the
allocation of the bytes read on the other end; on a CUDA device both sides also page-lock
their mappings (`pin`), so those copies run at the bus's speed. Measured on an H100, a call of
the training check's cross-entropy slot (134 MB of arguments, as many bytes of results) went
from 565 ms through the pipe to 60 ms through pageable regions and 11.5 ms through pinned ones
(docs/benchmarks.md, "The training check's channel on a GPU").

The auditor owns the sizes: it grows a region before a call that needs more, maps only the size
it chose (whatever the child grows the file to), and reads the other side's tensors only inside
it, from offsets it checks. The region is
sealed against shrinking, so a child that truncates the file cannot make the auditor's reads
fault; what a child writes into a region while the auditor copies from it can only change that
child's own results.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import mmap
import os
from dataclasses import dataclass

import torch

from kernelaudit.host_copies import host_copy
from kernelaudit.runner.boundary.memory_file import memory_file

ALIGN = 64
"""Tensors and arena buffers start at multiples of this many bytes from the region's start."""
_GROWTH = 1 << 22
"""Regions grow in steps of at least 4 MiB (and at least double), so a run whose calls grow
slowly remaps a few times, not at every call."""


@dataclass(frozen=True)
class SharedTensor:
    """A tensor's place in a region: what a message carries instead of its bytes."""

    offset: int
    dtype: str
    shape: tuple[int, ...]


def available() -> bool:
    """Whether this platform has sealable anonymous memory files (Linux)."""
    return hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS")


def _nbytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * dtype.itemsize


def aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def room(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    """The bytes a tensor takes in a region, alignment included."""
    return aligned(_nbytes(dtype, shape))


class Region:
    """One memory file, mapped. `create` makes a new one (the auditor); `Region(fd)` maps one
    passed in (the child)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._map: mmap.mmap | None = None
        self.size = 0
        self._pinned = False
        self._registered = 0
        """The address page-locked for the GPU's copies (0: none)."""
        self._remap(os.fstat(fd).st_size)

    @classmethod
    def create(cls, name: str) -> Region:
        """A new region (`memory_file.memory_file`); OSError where none can be made."""
        fd = memory_file(name)
        if fd < 0:
            raise OSError(f"no anonymous memory file could be made for {name}")
        return cls(fd)

    def _remap(self, size: int) -> None:
        """Map the file's first `size` bytes (the whole mapping anew when the size changed)."""
        if size == self.size and (self._map is not None or size == 0):
            return
        self.close_map()
        self.size = size
        if size:
            self._map = mmap.mmap(self.fd, size)
            self._register()

    def pin(self) -> None:
        """Page-lock the mapping (now and after each growth), so copies between it and a CUDA
        device run at the bus's speed; where the driver refuses, copies stay pageable."""
        self._pinned = True
        self._register()

    def _register(self) -> None:
        if not self._pinned or self._map is None or self._registered:
            return
        address = torch.frombuffer(self._map, dtype=torch.uint8).data_ptr()
        with contextlib.suppress(RuntimeError, AttributeError):
            failed = torch.cuda.cudart().cudaHostRegister(address, self.size, 0)
            if int(getattr(failed, "value", failed)) == 0:
                self._registered = address

    def grow(self, size: int, most: int | None = None) -> None:
        """At least `size` bytes (the auditor's side), and, growing by steps, no more than
        `most` past that. The auditor maps the size it chose, never the file's: a child that
        grew the file makes it map, read or pin no more."""
        if size <= self.size:
            return
        wanted = max(size, 2 * self.size, _GROWTH)
        if most is not None:
            wanted = max(size, min(wanted, most))
        if os.fstat(self.fd).st_size < wanted:  # larger already where the child grew it
            os.ftruncate(self.fd, wanted)
        self._remap(wanted)

    def refresh(self) -> None:
        """Map what the other side grew the file to (the child's side, before each call)."""
        self._remap(os.fstat(self.fd).st_size)

    def put(self, tensors: list[torch.Tensor]) -> list[SharedTensor] | None:
        """Copy `tensors` in, one after another from the start; None when they do not fit
        (nothing is copied then)."""
        if sum(room(t.dtype, tuple(t.shape)) for t in tensors) > self.size:
            return None
        shared, offset = [], 0
        for tensor in tensors:
            place = self.put_at(tensor, offset)
            assert place is not None, "they were counted to fit"
            shared.append(place)
            offset += room(tensor.dtype, tuple(tensor.shape))
        return shared

    def put_at(self, tensor: torch.Tensor, offset: int) -> SharedTensor | None:
        """Copy `tensor` in at `offset` (aligned up); None when it does not fit there."""
        place, shape = aligned(offset), tuple(tensor.shape)
        if place + _nbytes(tensor.dtype, shape) > self.size:
            return None
        self._view(place, tensor.dtype, shape).copy_(tensor.detach().reshape(shape))
        return SharedTensor(place, str(tensor.dtype).removeprefix("torch."), shape)

    def take(self, shared: SharedTensor, device: torch.device | str) -> torch.Tensor:
        """A tensor of its own on `device`, copied from the region; ValueError when the
        description is not one of a tensor inside the region."""
        view = self.view(shared)
        target = torch.device(device)
        return host_copy(view) if target.type == "cpu" else view.to(target)

    def view(self, shared: SharedTensor) -> torch.Tensor:
        """The tensor `shared` names, in the region itself (no copy: it changes when the
        region is written again); ValueError when the description is not one of a tensor
        inside the region."""
        dtype = getattr(torch, shared.dtype, None) if isinstance(shared.dtype, str) else None
        shape = shared.shape
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown tensor dtype {shared.dtype!r}")
        if not isinstance(shape, tuple) or not all(type(n) is int and n >= 0 for n in shape):
            raise ValueError(f"tensor shape {shape!r} is not a tuple of sizes")
        offset = shared.offset
        if type(offset) is not int or offset < 0 or offset % ALIGN:
            raise ValueError(f"offset {offset!r} is not an aligned place in the region")
        if offset + _nbytes(dtype, shape) > self.size:
            raise ValueError(
                f"{shared.dtype}{list(shape)} at offset {offset:,} runs past the region's "
                f"{self.size:,} bytes"
            )
        return self._view(offset, dtype, shape)

    def bytes_at(self, offset: int, nbytes: int) -> torch.Tensor:
        """Bytes `offset` to `offset + nbytes` of the region itself, as a uint8 tensor (no
        copy); ValueError when they are not all inside it."""
        if offset < 0 or nbytes <= 0 or offset + nbytes > self.size:
            raise ValueError(
                f"{nbytes:,} bytes at offset {offset:,} are not inside the region's "
                f"{self.size:,} bytes"
            )
        return self._view(offset, torch.uint8, (nbytes,))

    def _view(self, offset: int, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        count = math.prod(shape)
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        assert self._map is not None
        flat = torch.frombuffer(
            self._map, dtype=torch.uint8, count=count * dtype.itemsize, offset=offset
        )
        return flat.view(dtype).reshape(shape)

    def close_map(self) -> None:
        if self._registered:
            with contextlib.suppress(RuntimeError, AttributeError):
                torch.cuda.cudart().cudaHostUnregister(self._registered)
            self._registered = 0
        if self._map is not None:
            with contextlib.suppress(BufferError):  # a tensor still viewing it keeps it
                self._map.close()
            self._map = None

    def close(self) -> None:
        self.close_map()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
