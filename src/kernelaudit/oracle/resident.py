"""Kept draws held on the device for the trusted side.

A layer's weights are the same values in nearly every case of an audit (`inputs.reuse`), and
each case's truth and baseline used to copy them from the host again: twice a case, and again
for the case nudged by one rounding. For a mixture of 64 experts (4 GB of bfloat16 weights)
that was 86 s of a 372 s audit on an H100, through pageable host memory at about 6 GB/s.

Now the first case that takes a kept draw copies it to the device once, at its native dtype,
and every later case gets a copy made on the device from it (and its float64 truth a
promotion of it there). What is held is bounded by `most_bytes` (an eighth of the device's
memory), the least recently used dropped first; the candidate's limit is three quarters of the
memory free when the audit began (`runner.auditor.limits.default_limits`), so this stays within the
quarter the auditor keeps for its own work. A tensor that holds no kept draw unchanged
(`Draws.origin`), or too large to hold, is copied from the host as before. The values are the
same bits either way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import torch

from kernelaudit.device_copies import DEVICE_COPIES, moved, share_of
from kernelaudit.inputs.reuse import DRAWS, Draws

Made = TypeVar("Made")

SHARE = 8
"""What is held is at most the device's memory divided by this."""


class Resident:
    """Device copies of kept draws, by the draw, the dtype and the device."""

    def __init__(self, draws: Draws, most_bytes: int | None = None) -> None:
        self.draws = draws
        self.most_bytes = most_bytes
        """The bytes held at most; None: an eighth of the memory of the device asked for."""
        self._held: OrderedDict[
            tuple[Hashable, torch.dtype, torch.device, Hashable], torch.Tensor
        ] = OrderedDict()
        self._paused = False

    def held_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._held.values())

    def get(
        self,
        value: torch.Tensor,
        dtype: torch.dtype,
        device: torch.device,
        derived: tuple[Hashable, Callable[[torch.Tensor], torch.Tensor]] | None = None,
    ) -> torch.Tensor | None:
        """The copy held on `device` of the kept draw that `value` holds, at `dtype` (made
        now if it is not held yet); None where `value` holds no kept draw unchanged or the
        copy would not fit. With `derived` (a name, and a function of that copy that writes
        nothing into it), what the function gives, held the same way under that name: values
        that depend on nothing but the draw's (its case nudged by one rounding, say). The
        tensor returned is shared: never write to it."""
        origin = None if self._paused else self.draws.origin(value)
        if origin is None:
            return None
        key = (origin, dtype, device, None if derived is None else derived[0])
        held = self._held.get(key)
        if held is not None:
            self._held.move_to_end(key)
            return held
        size = value.numel() * dtype.itemsize
        most = self._most(device)
        if size > most:
            return None
        if derived is None:
            # before the copy: the device never holds both (but for the moment a widened
            # copy is sent at its own dtype, `moved`)
            self._room_for(size, most)
            made = moved(value.detach(), device, dtype, copy=True)
        else:
            native = self.get(value, dtype, device)
            if native is None:
                return None
            self._room_for(size, most)  # `native`, the most recently used, goes last
            made = derived[1](native)
        made_size = made.numel() * made.element_size()
        if made_size > most:
            return made  # given, not held
        self._room_for(made_size, most)
        self._held[key] = made
        return made

    def _room_for(self, size: int, most: int) -> None:
        """Drop the least recently used copies until `size` more bytes fit within `most`."""
        while self._held and self.held_bytes() + size > most:
            self._held.popitem(last=False)

    def clear(self) -> None:
        """Give back everything held (the audit is over)."""
        self._held.clear()

    def retried_without(self, compute: Callable[[], Made]) -> Made:
        """`compute()`; where the device runs out of memory while copies are held (these, and
        those of `device_copies`: kept cases' results, inputs given to calls), they are all
        given back and `compute()` runs again with no kept draw held, so what fits the device
        without them still runs."""
        try:
            return compute()
        except torch.cuda.OutOfMemoryError:
            if not self._held and not DEVICE_COPIES.held_bytes():
                raise
        self.clear()
        DEVICE_COPIES.clear()
        torch.cuda.empty_cache()
        with self.paused():
            return compute()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Within this block nothing is held or given: every copy comes from the host."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    def _most(self, device: torch.device) -> int:
        return share_of(device, SHARE) if self.most_bytes is None else self.most_bytes


RESIDENT = Resident(DRAWS)
"""The process's device copies of its kept draws (`oracle.truth` copies inputs through it)."""
