"""Device memory around one call, measured the same way for the candidate (in its worker) and
for the reference (on the trusted side): the peak torch's allocator reaches during the call,
and what stays allocated afterwards, in torch's allocator and outside it.

Library workspaces torch keeps between calls (cuBLAS's, one per stream) are released before
each reading, so a first matrix product does not read as memory the caller holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from kernelaudit.timing.measure import synchronize

ALLOCATION_GRANULE = 512
"""torch's caching allocator rounds every block up to a multiple of this many bytes."""


@dataclass(frozen=True)
class DeviceMemory:
    """One reading of the device's memory."""

    allocated: int
    """Bytes allocated through torch's allocator."""
    reserved: int
    """Bytes torch's allocator holds from the driver (allocated or cached)."""
    free: int
    """Bytes the driver reports free on the device (for every process)."""

    def unseen_since(self, earlier: DeviceMemory) -> int:
        """Device memory taken since `earlier` that torch's allocator does not account for."""
        return (earlier.free - self.free) - (self.reserved - earlier.reserved)


def read_memory(device: torch.device) -> DeviceMemory:
    """The device's memory once its work is done and torch's library workspaces released."""
    synchronize(device)
    release_workspaces()
    return DeviceMemory(
        allocated=torch.cuda.memory_allocated(device),
        reserved=torch.cuda.memory_reserved(device),
        free=torch.cuda.mem_get_info(device)[0],
    )


def kept_since(
    device: torch.device, at_load: DeviceMemory, harness: Sequence[torch.Tensor], extra: int
) -> tuple[int, int]:
    """What the candidate keeps on the device now: (bytes allocated beyond what was allocated
    at `at_load` and beyond the harness's own tensors and `extra` bytes it holds besides them,
    bytes taken outside torch's allocator since `at_load`)."""
    now = read_memory(device)
    held = now.allocated - at_load.allocated - storage_bytes(harness) - extra
    return held, now.unseen_since(at_load)


def start_peak(device: torch.device) -> int:
    """Begin watching the allocator's peak; returns the bytes allocated now."""
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def peak_since(device: torch.device, allocated_at_start: int) -> int:
    """The most bytes allocated since `start_peak`, above what was allocated then. The
    allocator counts at allocation time, on the host: no synchronise is needed."""
    return max(0, torch.cuda.max_memory_allocated(device) - allocated_at_start)


def release_workspaces() -> None:
    """Return the cuBLAS workspaces torch caches per stream to its allocator (where this
    torch build can)."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()


def storage_bytes(tensors: Iterable[object], excluded: Iterable[int] = ()) -> int:
    """Bytes the allocator holds for the distinct storages of `tensors` (each rounded as the
    allocator rounds it), leaving out storages whose data pointer is in `excluded`."""
    seen = set(excluded)
    total = 0
    for tensor in tensors:
        if type(tensor) is not torch.Tensor or tensor.device.type != "cuda":
            continue
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if pointer in seen or not storage.nbytes():
            continue
        seen.add(pointer)
        total += -(-storage.nbytes() // ALLOCATION_GRANULE) * ALLOCATION_GRANULE
    return total
