"""Host copies of tensors, page-locked where the process uses a GPU.

A result copied from a GPU into fresh pageable memory pays for every page it touches first:
on an H100 host a 64 MiB float64 tensor came back at 1.5 GB/s that way, and at 53 GB/s into
page-locked memory from torch's caching host allocator, which hands the same blocks out again
once they are freed (`benchmarks/host_copies.py`). A copy made here is page-locked when this
process has started CUDA and the tensor is at least `PINNED_LEAST_BYTES`; otherwise (a CPU
audit, a small tensor, a driver that refuses) it is plain memory. Either way it holds the same
values, contiguous, with no autograd history, strides or subclass of the original.

The caching allocator rounds every block up to a power of two and keeps a freed block for a
request of its own size until it is emptied. An audit whose cases differ in size leaves a block
of each size behind: the float64 truths of a video patch embedding (6.8 to 41.6 GB a case)
and its baselines call for 150 GB of blocks, and on a 128 GiB host the auditor's page-locked
memory reached 117 GiB before the kernel killed it, without a report. So the blocks the
allocator owns are held to `PINNED_SHARE` of the machine's memory: past it, the unused ones
are given back first, and a copy whose block still does not fit is made in pageable memory
(slower to fill, never lost). A large one of those comes from the GPU through two small
page-locked buffers in turn (`STAGED_LEAST_BYTES`, `_staged`), the host's side of it copied
with every thread torch has, not page by page on one.
"""

from __future__ import annotations

import math
import threading

import torch

from kernelaudit.runner.auditor.limits import machine_memory

PINNED_LEAST_BYTES = 1 << 20
"""Smaller copies are made in pageable memory: their first touch costs little, and the caching
allocator rounds a block up to a power of two."""

PINNED_SHARE = 4
"""The page-locked blocks this process's caching allocator may own at most: the machine's
memory divided by this (the kept cases take an eighth, `engine.host_memory.cache_bytes`, and
their blocks up to twice that once rounded)."""

_lock = threading.Lock()
_requested = 0
"""Where torch does not report what its allocator owns: the rounded bytes asked of it since
it was last emptied (more than it owns where it handed a cached block out again)."""


STAGED_LEAST_BYTES = 64 << 20
"""Pageable copies from a GPU of at least this many bytes go through `_STAGE_BYTES` of
page-locked memory at a time (`_staged`)."""

_STAGE_BYTES = 32 << 20
"""Bytes of each of the two page-locked buffers a staged copy goes through."""

_stages: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
"""The staging buffers, made once per device a staged copy came from (bytes, page-locked)."""

_staging = threading.Lock()
"""Held by a staged copy for as long as it uses the buffers."""


def host_copy(
    value: torch.Tensor, dtype: torch.dtype | None = None, page_locked: bool = True
) -> torch.Tensor:
    """A contiguous host copy of `value` at `dtype` (its own when None); in pageable memory
    whatever its size with `page_locked=False`."""
    shape, dtype = tuple(value.shape), dtype or value.dtype
    nbytes = math.prod(shape) * dtype.itemsize
    locked = page_locked and nbytes >= PINNED_LEAST_BYTES
    copy = _page_locked(shape, dtype) if locked else None
    if copy is None:
        copy = torch.empty(shape, dtype=dtype)
        if value.is_cuda and value.dtype == dtype and nbytes >= STAGED_LEAST_BYTES:
            # laid out otherwise, made contiguous on the device first: the temporary torch's
            # own copy would make there anyway, before copying into fresh pageable memory page
            # by page. A worker's results laid out otherwise (a patch embedding's transposed
            # output of 0.4 to 10 G elements) came back that way: in a sampled audit on an
            # H200, 30% of the worker's time (docs/benchmarks.md, "Casts on the device")
            _staged(value.detach().contiguous(), copy)
            return copy
    with torch.no_grad():
        copy.copy_(value.detach())
    return copy


def _staged(value: torch.Tensor, copy: torch.Tensor) -> None:
    """Copy the contiguous device tensor `value` into the fresh pageable `copy` of its dtype and
    shape through two page-locked buffers in turn: the device writes one at the bus's speed
    while the host copies the other out with all of torch's threads. A device's own copy into
    fresh pageable memory faults its pages in one by one on one thread (1.5 GB/s on an H100
    host, `benchmarks/host_copies.py`), which made the float64 truths of outputs of billions
    of elements most of an audit's time."""
    source = value.reshape(-1).view(torch.uint8)
    target = copy.reshape(-1).view(torch.uint8)
    stages = _stage_buffers(value.device)
    stream = torch.cuda.current_stream(value.device)
    done = [torch.cuda.Event(), torch.cuda.Event()]
    pending: tuple[int, int, int] | None = None  # (buffer, start, length) copied but not out
    total = source.numel()
    with _staging, torch.no_grad():
        for turn, start in enumerate(range(0, total, _STAGE_BYTES)):
            length = min(_STAGE_BYTES, total - start)
            which = turn % 2
            stages[which][:length].copy_(source[start : start + length], non_blocking=True)
            done[which].record(stream)
            if pending is not None:
                _copy_out(stages, done, target, pending)
            pending = (which, start, length)
        if pending is not None:
            _copy_out(stages, done, target, pending)


def _copy_out(
    stages: tuple[torch.Tensor, torch.Tensor],
    done: list[torch.cuda.Event],
    target: torch.Tensor,
    pending: tuple[int, int, int],
) -> None:
    which, start, length = pending
    done[which].synchronize()
    target[start : start + length].copy_(stages[which][:length])


def _stage_buffers(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    with _lock:
        if device not in _stages:
            _stages[device] = (
                torch.empty(_STAGE_BYTES, dtype=torch.uint8, pin_memory=True),
                torch.empty(_STAGE_BYTES, dtype=torch.uint8, pin_memory=True),
            )
        return _stages[device]


def release() -> None:
    """Give the page-locked blocks the caching allocator keeps unused back to the system (an
    audit is over, or the blocks it owns would pass `PINNED_SHARE`)."""
    global _requested
    empty = getattr(torch._C, "_host_emptyCache", None)
    if empty is not None and torch.cuda.is_initialized():
        empty()
        _requested = 0


def pinned_most_bytes() -> int:
    """The page-locked bytes the caching allocator may own at most (`PINNED_SHARE`)."""
    return machine_memory() // PINNED_SHARE


def _block(nbytes: int) -> int:
    """The caching allocator's block for a request: the next power of two."""
    return 1 << max(0, nbytes - 1).bit_length()


def _owned() -> int:
    """The page-locked bytes the caching allocator owns, in use or cached, the staging buffers
    aside (a few tens of MiB made once, `_STAGE_BYTES`)."""
    try:
        owned = int(torch.cuda.host_memory_stats()["allocated_bytes.current"])
    except (AttributeError, KeyError, RuntimeError, TypeError):
        return _requested
    return owned - sum(_block(b.numel()) for pair in _stages.values() for b in pair)


def _page_locked(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
    """An empty page-locked tensor; None where this process has not started CUDA, where its
    block would take the allocator past `pinned_most_bytes` even with its unused blocks given
    back, or where the driver has no page-locked memory to give (the copy is then pageable,
    as anywhere else)."""
    global _requested
    if not torch.cuda.is_initialized():
        return None
    block, most = _block(math.prod(shape) * dtype.itemsize), pinned_most_bytes()
    with _lock:
        if block > most:
            return None
        if _owned() + block > most:
            release()
            if _owned() + block > most:
                return None
        try:
            copy = torch.empty(shape, dtype=dtype, pin_memory=True)
        except RuntimeError:
            return None
        _requested += block
        return copy
