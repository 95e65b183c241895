"""Host copies of tensors, page-locked where the process uses a GPU.

A result copied from a GPU into fresh pageable memory pays for every page it touches first:
on an H100 host a 64 MiB float64 tensor came back at 1.5 GB/s that way, and at 53 GB/s into
page-locked memory from torch's caching host allocator, which hands the same blocks out again
once they are freed (`benchmarks/host_copies.py`). A copy made here is page-locked when this
process has started CUDA and the tensor is at least `PINNED_LEAST_BYTES`; otherwise (a CPU
audit, a small tensor, a driver that refuses) it is plain memory. Either way it holds the same
values, contiguous, with no autograd history, strides or subclass of the original.
"""

from __future__ import annotations

import math

import torch

PINNED_LEAST_BYTES = 1 << 20
"""Smaller copies are made in pageable memory: their first touch costs little, and the caching
allocator rounds a block up to a power of two."""


def host_copy(
    value: torch.Tensor, dtype: torch.dtype | None = None, page_locked: bool = True
) -> torch.Tensor:
    """A contiguous host copy of `value` at `dtype` (its own when None); in pageable memory
    whatever its size with `page_locked=False`."""
    shape, dtype = tuple(value.shape), dtype or value.dtype
    locked = page_locked and math.prod(shape) * dtype.itemsize >= PINNED_LEAST_BYTES
    copy = _page_locked(shape, dtype) if locked else None
    if copy is None:
        copy = torch.empty(shape, dtype=dtype)
    with torch.no_grad():
        copy.copy_(value.detach())
    return copy


def release() -> None:
    """Give the page-locked blocks the caching allocator keeps back to the system (an audit is
    over; the next one makes its own)."""
    empty = getattr(torch._C, "_host_emptyCache", None)
    if empty is not None and torch.cuda.is_initialized():
        empty()


def _page_locked(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
    """An empty page-locked tensor; None where this process has not started CUDA or the
    driver has no page-locked memory to give (the copy is then pageable, as anywhere else)."""
    if not torch.cuda.is_initialized():
        return None
    try:
        return torch.empty(shape, dtype=dtype, pin_memory=True)
    except RuntimeError:
        return None
