"""The stretch of memory a worker lays out its calls' tensors in.

The auditor sets it aside: on a CPU after the invocation's own tensors in the region it sends
them in (`runner.boundary.shared`), on a GPU in device memory it lends the worker
(`runner.boundary.lent`); and sizes it to hold a guarded buffer (`runner.boundary.guard`) for every
input and output slot of every call that does not reuse an earlier call's buffers, and for the
results of every repetition a call is made (`Call.repeat`). The worker takes the buffers from it in
order, and says where each one went (`Placement`); the auditor then reads the bands, the
inputs and the slots at those places through its own mapping (`runner.auditor.observed`), so what
they show does not rest on code in the candidate's process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

import torch

from kernelaudit.runner.boundary.guard import guarded_nbytes
from kernelaudit.runner.boundary.messages import Call, Invocation, OutputSlot, TensorArg
from kernelaudit.runner.boundary.shared import aligned


def set_aside(invocation: Invocation, after: int, most: int) -> Invocation:
    """`invocation` with an arena after the first `after` bytes of its region (its own large
    tensors), where one fits in a region of `most` bytes; without one otherwise."""
    size = arena_bytes(invocation.calls)
    start = aligned(after)
    if size and start + size <= most:
        return replace(invocation, arena=(start, size))
    return replace(invocation, arena=(0, 0))


def arena_bytes(calls: tuple[Call, ...]) -> int:
    """The bytes an arena needs for every fresh buffer of `calls`, alignment included: one per
    tensor argument (at its layout) and one per output slot of each call that does not reuse
    an earlier call's buffers, and one per output of each of a call's repetitions."""
    total = 0
    for call in calls:
        if call.reuse is not None:
            continue
        for arg in call.args:
            if isinstance(arg, TensorArg):
                shape = tuple(arg.values.shape)
                total += aligned(guarded_nbytes(shape, arg.values.dtype, arg.layout))
        total += slots_bytes(call.slots) + call.repeat * slots_bytes(repeated_slots(call))
    return total


def slots_bytes(slots: Sequence[OutputSlot]) -> int:
    """The bytes an arena needs for a guarded, contiguous buffer for each of `slots`,
    alignment included."""
    return sum(aligned(guarded_nbytes(tuple(s.shape), s.dtype, "contiguous")) for s in slots)


def repeated_slots(call: Call) -> tuple[OutputSlot, ...]:
    """The buffers each of a call's repetitions (`Call.repeat`) leaves its results in: copies
    of its slots (destination style), else of its declared outputs (`Call.repeat_outputs`)."""
    return call.slots or call.repeat_outputs


class Memory(Protocol):
    """What an arena lies in: the invocation's region (`runner.boundary.shared`), or device memory
    the auditor lent the worker (`runner.boundary.lent`)."""

    @property
    def size(self) -> int: ...

    def bytes_at(self, offset: int, count: int) -> torch.Tensor: ...


class Arena:
    """The worker's side: buffers handed out in order from `start`, up to `size` bytes."""

    def __init__(self, region: Memory, start: int, size: int) -> None:
        self.region = region
        self.start = start
        self.end = start + size
        self._next = start

    def take(self, nbytes: int) -> tuple[int, torch.Tensor] | None:
        """The next `nbytes` of the arena (their offset in the region and a uint8 tensor over
        them), or None when they do not fit."""
        offset = aligned(self._next)
        if offset + nbytes > min(self.end, self.region.size):
            return None
        self._next = offset + nbytes
        return offset, self.region.bytes_at(offset, nbytes)

    def mark(self) -> int:
        """Where the next buffer would be taken from (for `rewind`)."""
        return self._next

    def rewind(self, mark: int) -> None:
        """Take buffers from `mark` again: those taken since are given up (a call made anew)."""
        self._next = mark

    def lies_in(self, tensor: torch.Tensor) -> bool:
        """Whether `tensor`'s storage starts inside the arena (a buffer taken from it)."""
        if self.end <= self.start:
            return False
        first = self.region.bytes_at(self.start, 1).data_ptr()
        return first <= tensor.untyped_storage().data_ptr() < first + self.end - self.start
