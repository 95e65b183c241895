"""Guarded buffers: every tensor the candidate touches sits between bands of canary bytes.

A guarded buffer is one flat byte allocation: a leading band of `GUARD_BYTES`, the storage
the view needs, and a trailing band, every byte first set to the canary: random bytes drawn
once per process (`CANARY_BYTES` of them, repeated), so no fixed value in memory next to an
input tells a candidate that it is watched; read as numbers they are garbage, as
uninitialised memory is, so an out-of-bounds read shows up in the results. The view is built
with `as_strided` inside it. After the call, any byte that is not an element of the view (in
the bands, or in the gaps of a strided or expanded storage) and no longer holds its canary
byte was written out of bounds.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from kernelaudit.inputs.layouts import Geometry, geometry
from kernelaudit.runner.boundary.messages import GuardBreach

if TYPE_CHECKING:
    from kernelaudit.runner.boundary.arena import Arena

GUARD_BYTES = 512
"""Each band's size. A multiple of every element size and of 16, so views stay 16-byte aligned
(the allocators align buffers to at least 64 bytes) unless a layout's offset misaligns them."""

CANARY_BYTES = 4096
"""The length of the canary pattern, a multiple of GUARD_BYTES and of every element size; byte
i of a guarded buffer holds pattern byte (i + the buffer's phase) % CANARY_BYTES."""


def draw_canary() -> bytes:
    """A canary pattern drawn at random: no byte is 0x00 or 0xFF, so a write of zeros or of
    all-ones bits is always seen."""
    return bytes(1 + b % 254 for b in os.urandom(CANARY_BYTES))


_CANARY = draw_canary()
"""This process's canary pattern: drawn at random, so it differs in every worker (the
auditor's draw where it sent one, `use_canary`)."""
_CANARY_ON: dict[torch.device, torch.Tensor] = {}
_PHASE_STEP = 1031
"""Successive buffers start this far apart in the pattern (a prime, so the first
CANARY_BYTES buffers all start at different places): a copy of one buffer's bands into
another's changes its bytes."""
_phase = [int.from_bytes(os.urandom(2), "little") % CANARY_BYTES]


@dataclass(frozen=True)
class GuardedTensor:
    """A view living inside a guarded buffer, and the name breaches are reported under.

    The view's geometry is recorded when it is made: the candidate may resize or re-point the
    view object it was handed, but the buffer's elements stay where they were.
    """

    label: str
    buffer: torch.Tensor
    """The whole allocation, as uint8."""
    view: torch.Tensor
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    first_byte: int
    """Where the view's first element starts, in bytes from the buffer's start."""
    phase: int = 0
    """Where in the canary pattern the buffer's first byte is."""
    offset: int = -1
    """Where the buffer starts in the arena it was taken from (-1: memory of its own)."""

    @property
    def end_byte(self) -> int:
        """Just past the last byte of the view's last element."""
        span = storage_span(self.shape, self.stride)
        return self.first_byte + span * self.view.dtype.itemsize


def storage_span(shape: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """Elements of storage a view of this shape and stride reaches, from its first element."""
    if math.prod(shape) == 0:
        return 0
    return 1 + sum((size - 1) * step for size, step in zip(shape, stride, strict=True))


def allocate(
    label: str,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device | str,
    storage_offset: int = 0,
    storage_numel: int | None = None,
    arena: Arena | None = None,
) -> GuardedTensor:
    """A view of `shape` and `stride` inside a fresh guarded buffer; every byte holds its
    canary byte. With an `arena` (on a CPU), the buffer is taken from it while it has
    room."""
    itemsize = dtype.itemsize
    if storage_numel is None:
        storage_numel = storage_offset + storage_span(shape, stride)
    nbytes = 2 * GUARD_BYTES + storage_numel * itemsize
    phase = _phase[0] = (_phase[0] + _PHASE_STEP) % CANARY_BYTES
    taken = arena.take(nbytes) if arena is not None else None
    offset, buffer = taken or (-1, torch.empty(nbytes, dtype=torch.uint8, device=device))
    _fill_canary(buffer, phase)
    return guarded_in(label, buffer, shape, stride, dtype, storage_offset, phase, offset)


def guarded_in(
    label: str,
    buffer: torch.Tensor,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    dtype: torch.dtype,
    storage_offset: int,
    phase: int,
    offset: int = -1,
) -> GuardedTensor:
    """The view of `shape` and `stride` that `allocate` puts in a guarded buffer (the flat
    uint8 `buffer`, bands included), without touching its bytes."""
    itemsize = dtype.itemsize
    view = buffer.view(dtype).as_strided(shape, stride, GUARD_BYTES // itemsize + storage_offset)
    first_byte = GUARD_BYTES + storage_offset * itemsize
    return GuardedTensor(
        label, buffer, view, tuple(shape), tuple(stride), first_byte, phase, offset
    )


def laid_out(shape: tuple[int, ...], layout: str) -> Geometry:
    """Where `place` puts a tensor of `shape` in its buffer for `layout` (contiguous where the
    layout means nothing for the shape, transposing a vector, say)."""
    return geometry(layout, shape) or contiguous_geometry(shape)


def guarded_nbytes(shape: tuple[int, ...], dtype: torch.dtype, layout: str) -> int:
    """The bytes of the guarded buffer `place` makes for a tensor of `shape` and `dtype`
    laid out as `layout`, both bands included."""
    return 2 * GUARD_BYTES + laid_out(shape, layout).storage_numel * dtype.itemsize


def place(
    label: str,
    values: torch.Tensor,
    layout: str,
    device: torch.device | str,
    arena: Arena | None = None,
) -> GuardedTensor:
    """Copy logical `values` into a guarded buffer on `device`, laid out as `layout` asks.

    A layout that means nothing for the shape (transposing a vector, say) falls back to
    contiguous.
    """
    shape = tuple(values.shape)
    where = laid_out(shape, layout)
    guarded = allocate(
        label,
        shape,
        where.stride,
        values.dtype,
        device,
        storage_offset=where.storage_offset,
        storage_numel=where.storage_numel,
        arena=arena,
    )
    # Elements repeated along a stride-0 dimension share memory; one copy of them is written.
    elements = _one_per_address(guarded.view)
    first = values[tuple(slice(0, n) for n in elements.shape)]
    if elements.shape != values.shape and not same_bits(first.expand(shape), values):
        raise ValueError(
            f"{label}: values of shape {list(shape)} vary along a dimension that layout "
            f"{layout!r} gives stride 0; draw them constant along it"
        )
    elements.copy_(first)
    return guarded


def same_elements(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise equality that counts NaN as equal to NaN."""
    same = a == b
    if a.dtype.is_floating_point:
        same |= torch.isnan(a) & torch.isnan(b)
    return same


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same shape, dtype and bytes (NaNs included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    flat_a, flat_b = _as_bytes(a), _as_bytes(b)
    # compared as the widest integers both divide into: a comparison of 8-byte words runs
    # several times faster than one of bytes on a CPU
    for word in (torch.int64, torch.int32, torch.int16):
        size = word.itemsize
        if flat_a.numel() % size == 0 and all(
            f.storage_offset() % size == 0 for f in (flat_a, flat_b)
        ):
            return torch.equal(flat_a.view(word), flat_b.view(word))
    return torch.equal(flat_a, flat_b)


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def holds(view: torch.Tensor, values: torch.Tensor) -> bool:
    """Whether `view` holds bit for bit `values` (on the CPU, or already where `view` is):
    compared where `view` lives, the values copied there for it, so a device buffer is not
    copied back to the host to be compared; on the host where the device has no room for the
    copy."""
    if view.device.type == "cpu":
        return same_bits(view, values)
    try:
        return same_bits(view, values.to(view.device))
    except torch.OutOfMemoryError:
        return same_bits(view.cpu(), values.cpu())


def use_canary(pattern: bytes) -> None:
    """Guard this process's buffers from now on with `pattern` (the auditor's draw, so it can
    check the bands of the buffers in an arena itself)."""
    if len(pattern) != CANARY_BYTES or 0 in pattern or 0xFF in pattern:
        raise ValueError(
            f"a canary pattern is {CANARY_BYTES} bytes, none of them 0x00 or 0xFF; got "
            f"{len(pattern)} bytes"
        )
    global _CANARY
    _CANARY = bytes(pattern)
    _CANARY_ON.clear()


def canary(
    first: int, end: int, device: torch.device, pattern: torch.Tensor | None = None
) -> torch.Tensor:
    """Bytes first..end of the canary pattern (this process's, or `pattern` on `device`)
    repeated without end (a read-only view)."""
    pattern = _pattern(device) if pattern is None else pattern
    start = first // CANARY_BYTES * CANARY_BYTES
    repeats = -(-(end - start) // CANARY_BYTES)
    tiled = pattern.expand(repeats, CANARY_BYTES).reshape(-1) if repeats > 1 else pattern
    return tiled[first - start : end - start]


def prepare(device: torch.device) -> None:
    """Make this process's canary pattern on `device` now, before memory is measured: it is
    the harness's, never a candidate's."""
    _pattern(device)


def _pattern(device: torch.device) -> torch.Tensor:
    if device not in _CANARY_ON:
        _CANARY_ON[device] = torch.frombuffer(bytearray(_CANARY), dtype=torch.uint8).to(device)
    return _CANARY_ON[device]


def _fill_canary(buffer: torch.Tensor, phase: int) -> None:
    """Write the canary pattern from `phase` on over a flat uint8 buffer, in one pass."""
    pattern = torch.roll(_pattern(buffer.device), -phase)
    rows = buffer.numel() // CANARY_BYTES
    if rows:
        whole = buffer[: rows * CANARY_BYTES].view(rows, CANARY_BYTES)
        whole.copy_(pattern.expand(rows, CANARY_BYTES))
    buffer[rows * CANARY_BYTES :].copy_(pattern[: buffer.numel() - rows * CANARY_BYTES])


def breach(guarded: GuardedTensor, call: int, pattern: bytes | None = None) -> GuardBreach | None:
    """The bytes outside the view's elements that no longer hold their canary (this
    process's, or `pattern`), if any."""
    start, end, buffer = guarded.first_byte, guarded.end_byte, guarded.buffer
    device, size, phase = buffer.device, buffer.numel(), guarded.phase
    drawn = None
    if pattern is not None:
        drawn = torch.frombuffer(bytearray(pattern), dtype=torch.uint8).to(device)
    pieces = [
        (buffer[:start], canary(phase, phase + start, device, drawn), 0),
        (buffer[end:], canary(phase + end, phase + size, device, drawn), end),
    ]
    if end > start and not _dense(guarded.shape, guarded.stride):
        # Inside the span, the gaps between elements: blank the elements in a copy of the
        # bytes and of their canary, so only gap bytes can differ.
        inside = buffer[start:end].clone()
        expected = canary(phase + start, phase + end, device, drawn).clone()
        _blank_elements(inside, guarded)
        _blank_elements(expected, guarded)
        pieces.append((inside, expected, start))
    count, first, last = 0, None, None
    for piece, expected, base in pieces:
        if torch.equal(piece, expected):
            continue
        changed = piece != expected
        count += int(changed.sum())
        flags = changed.to(torch.uint8)
        lo = base + int(flags.argmax())
        hi = base + piece.numel() - 1 - int(flags.flip(0).argmax())
        first = lo if first is None else min(first, lo)
        last = hi if last is None else max(last, hi)
    if first is None or last is None:
        return None
    return GuardBreach(
        tensor=guarded.label,
        call=call,
        bytes_changed=count,
        first_offset=first - start,
        last_offset=last - start,
    )


def contiguous_geometry(shape: tuple[int, ...]) -> Geometry:
    """The geometry of a plain contiguous tensor (for allocations that follow no layout)."""
    where = geometry("contiguous", shape)
    assert where is not None, f"no contiguous geometry for shape {shape}"
    return where


def _dense(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Whether the elements fill their span exactly once: row-major in some order of dims."""
    expected = 1
    for step, size in sorted((st, n) for n, st in zip(shape, stride, strict=True) if n > 1):
        if step != expected:
            return False
        expected *= size
    return True


_WORDS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _blank_elements(span: torch.Tensor, guarded: GuardedTensor) -> None:
    """Zero the bytes of the view's elements in `span`, a copy of its byte span."""
    itemsize = guarded.view.dtype.itemsize
    word = _WORDS.get(itemsize)
    if word is not None:
        elements = span.view(word).as_strided(guarded.shape, guarded.stride, 0)
        _one_per_address(elements).zero_()
        return
    as_bytes = span.as_strided(
        (*guarded.shape, itemsize), (*(s * itemsize for s in guarded.stride), 1), 0
    )
    _one_per_address(as_bytes).zero_()


def _one_per_address(view: torch.Tensor) -> torch.Tensor:
    for dim, (size, step) in enumerate(zip(view.shape, view.stride(), strict=True)):
        if step == 0 and size > 1:
            view = view.narrow(dim, 0, 1)
    return view
