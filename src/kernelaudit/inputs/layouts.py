"""Memory layouts: the same logical values behind different strides, offsets and storages.

Benchmarks hand kernels fresh contiguous tensors; real callers pass transposed weights, sliced
activations, broadcast biases and views that start mid-allocation. A kernel that reads
`data_ptr()` and assumes row-major memory computes on the wrong elements for all of them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import torch

from kernelaudit.errors import UsageError
from kernelaudit.problem.spec import LAYOUTS

LAYOUT_SUMMARIES: Mapping[str, str] = MappingProxyType(
    {
        "contiguous": "Row-major, starting at the beginning of its own storage.",
        "transposed": (
            "The last two dimensions swapped in memory (a weight stored as W.T and passed "
            "back transposed): the last dimension is no longer the fast one."
        ),
        "permuted": (
            "Memory order fully reversed (column-major for matrices): every dimension's "
            "stride differs from row-major."
        ),
        "strided": (
            "Every other element of a buffer twice as wide (x[..., ::2]): the last dimension "
            "has stride 2, so a kernel assuming unit stride reads the gaps."
        ),
        "offset": (
            "Row-major, starting one element into its storage: the base pointer is misaligned "
            "for vectorised loads that assume a 16-byte aligned allocation."
        ),
        "expanded": (
            "Stride 0 along the first dimension longer than 1 (a broadcast from size 1): "
            "many logical elements share one memory location."
        ),
        "broadcast": (
            "Stride 0 along every dimension: one value seen at every position, as the "
            "upstream gradient of `loss.sum()` or `loss.mean()` reaches a backward."
        ),
    }
)


@dataclass(frozen=True)
class Geometry:
    """Where a layout puts a tensor of a given shape in memory.

    storage_numel counts elements from the start of the storage, so it is at least
    storage_offset + (index of the last element reached) + 1.
    """

    stride: tuple[int, ...]
    storage_offset: int
    storage_numel: int


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides: list[int] = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def expand_dim(shape: tuple[int, ...]) -> int | None:
    """The dimension an "expanded" layout broadcasts: the first one longer than 1."""
    return next((d for d, size in enumerate(shape) if size > 1), None)


def geometry(layout: str, shape: tuple[int, ...]) -> Geometry | None:
    """The geometry of `layout` for `shape`, or None where the layout means nothing for it
    (a transpose of a vector, a permutation of a matrix, any non-contiguous empty tensor)."""
    if layout not in LAYOUTS:
        raise UsageError(f"unknown layout {layout!r}; choose one of: {', '.join(LAYOUTS)}")
    return _geometry(layout, tuple(shape))


@functools.lru_cache(maxsize=4096)
def _geometry(layout: str, shape: tuple[int, ...]) -> Geometry | None:
    """`geometry`, kept: the auditor asks it for every buffer of every call it reads (hundreds
    an invocation where a timed call repeats), always for the same few shapes."""
    numel = _numel(shape)
    ndim = len(shape)
    if layout == "contiguous":
        return Geometry(_row_major(shape), 0, numel)
    if numel == 0:
        return None
    if layout == "transposed":
        if ndim < 2 or shape[-1] == 1 or shape[-2] == 1:
            return None
        in_memory = _row_major((*shape[:-2], shape[-1], shape[-2]))
        return Geometry((*in_memory[:-2], in_memory[-1], in_memory[-2]), 0, numel)
    if layout == "permuted":
        if ndim < 3:
            return None
        return Geometry(tuple(reversed(_row_major(tuple(reversed(shape))))), 0, numel)
    if layout == "strided":
        if ndim < 1 or shape[-1] == 1:
            return None
        wide = _row_major((*shape[:-1], 2 * shape[-1]))
        return Geometry((*wide[:-1], 2), 0, 2 * numel)
    if layout == "offset":
        return Geometry(_row_major(shape), 1, numel + 1)
    if layout == "broadcast":
        if numel < 2:
            return None
        return Geometry((0,) * ndim, 0, 1)
    d = expand_dim(shape)
    if d is None:
        return None
    narrow = (*shape[:d], 1, *shape[d + 1 :])
    stride = list(_row_major(narrow))
    stride[d] = 0
    return Geometry(tuple(stride), 0, numel // shape[d])


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


def present(
    values: torch.Tensor, layout: str, fill: float | int | bool | None = None
) -> torch.Tensor:
    """A tensor equal to `values` (same device and dtype) laid out per `layout`, in a storage
    of its own.

    fill: written to the whole storage first, so the elements outside the view (the gaps of
    "strided", the element before "offset") hold a known value instead of whatever the
    allocator left there.
    """
    shape = tuple(values.shape)
    g = geometry(layout, shape)
    if g is None:
        raise UsageError(
            f"layout {layout!r} does not apply to a tensor of shape {list(shape)}; "
            "check `geometry(layout, shape)` before presenting"
        )
    storage = torch.empty(g.storage_numel, dtype=values.dtype, device=values.device)
    if fill is not None:
        storage.fill_(fill)
    view = storage.as_strided(shape, g.stride, g.storage_offset)
    if layout == "broadcast":
        first = values.reshape(-1)[:1]
        if not _same_values(values, first.reshape((1,) * len(shape)).expand(shape)):
            raise UsageError(
                f"values of shape {list(shape)} are not all equal, so they cannot be presented "
                "broadcast (stride 0 everywhere); draw a single value"
            )
        storage.copy_(first)
        return view
    if layout != "expanded":
        return view.copy_(values)
    d = expand_dim(shape)
    assert d is not None  # geometry() returned None otherwise
    first = values.narrow(d, 0, 1)
    if not _same_values(values, first.expand(shape)):
        raise UsageError(
            f"values of shape {list(shape)} differ along dimension {d}, so they cannot be "
            "presented expanded (stride 0 there); draw them with size 1 on that dimension"
        )
    view.narrow(d, 0, 1).copy_(first)
    return view
