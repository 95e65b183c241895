"""An invocation's large inputs copied to the device once, for all of its calls.

A call runs on fresh guarded buffers holding its inputs' values (`runner.worker.placing`), and after
the call each input is compared with the values it was given (`runner.boundary.guard.holds`), both
on the device. The values arrive on the host: copied from there, a probe that makes many calls on
one case crosses the host's bus twice per call and input. A mixture of experts' 22.5 GB of
weights, on the 36 calls of the races check, spent about 3 s a call that way. Here the first
call copies each large input to the device once, and every call after it is placed from that
copy and compared with it at the device's own speed.

A copy is made only where it takes at most a quarter of the room left in the worker (free
device memory, within its allocator's cap), so the candidate keeps most of what it had. Where
the harness then runs out of device memory, or a call fails for memory while copies are held,
the copies are let go and the call is made again without them (`with_room`): what a candidate
may allocate does not depend on them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

from kernelaudit.runner.boundary.arena import Arena
from kernelaudit.runner.boundary.failures import CandidateFailure
from kernelaudit.runner.boundary.messages import GuardBreach

LEAST_BYTES = 64 << 20
"""Inputs smaller than this are copied from the host at each call: their copy is quick."""

ROOM_SHARE = 4
"""A copy takes at most this fraction (one in `ROOM_SHARE`) of the room left in the worker."""

T = TypeVar("T")


class Staged:
    """The device copies of one invocation's large host inputs (`on_device`), each made at
    the first call that needs it and held until `release`."""

    def __init__(self, device: torch.device, least_bytes: int = LEAST_BYTES) -> None:
        self.device = device
        self.least_bytes = least_bytes
        self._copies: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        """id of the host values -> (the values, held so the id stays theirs; the copy)."""
        self._refused: set[int] = set()
        """ids of values given no copy, not tried again (the invocation holds those values
        for as long as this lives, so their ids stay theirs)."""
        self._released = False
        """Whether `release` let the copies go: none is made after it."""

    def on_device(self, values: torch.Tensor) -> torch.Tensor:
        """`values`' copy on the device, made now where there is none and it has room;
        `values` itself for a small or non-host tensor, a CPU device, or no room."""
        if (
            self._released
            or self.device.type != "cuda"
            or values.device.type != "cpu"
            or values.nbytes < self.least_bytes
        ):
            return values
        key = id(values)
        found = self._copies.get(key)
        if found is not None and found[0] is values:
            return found[1]
        if key in self._refused or values.nbytes * ROOM_SHARE > room(self.device):
            self._refused.add(key)
            return values
        try:
            copy = values.to(self.device)
        except torch.OutOfMemoryError:
            self._refused.add(key)
            return values
        self._copies[key] = (values, copy)
        return copy

    def tensors(self) -> list[torch.Tensor]:
        """The copies held (the harness's own memory, not the candidate's)."""
        return [copy for _, copy in self._copies.values()]

    def release(self) -> bool:
        """Let every copy go, and make none from now on; whether any was held."""
        held = bool(self._copies)
        self._copies.clear()
        self._released = True
        if held and self.device.type == "cuda":
            torch.cuda.empty_cache()
        return held


def room(device: torch.device) -> int:
    """The device memory the worker may still allocate: what is free on the device, and
    what its allocator's cap leaves."""
    if device.index is None:  # "cuda": the current device, which the cap is read for
        device = torch.device("cuda", torch.cuda.current_device())
    free, total = torch.cuda.mem_get_info(device)
    fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    cap = int(total * fraction(device)) if fraction is not None else total
    reserved = torch.cuda.memory_reserved(device)
    # what the allocator holds but has not handed out is room too
    reusable = max(0, reserved - torch.cuda.memory_allocated(device))
    return max(0, min(free, cap - reserved)) + reusable


def with_room(
    staged: Staged,
    breaches: list[GuardBreach],
    arena: Arena | None,
    made: Callable[[], T],
) -> T:
    """`made()`; made once more without `staged`'s copies where it failed for device memory
    while they were held (the breaches and arena buffers of the first attempt forgotten)."""
    before = len(breaches)
    mark = arena.mark() if arena is not None else None
    try:
        return made()
    except CandidateFailure as failure:
        if failure.kind != "memory" or not staged.release():
            raise
    except torch.OutOfMemoryError:  # the harness's own buffers
        if not staged.release():
            raise
    del breaches[before:]
    if arena is not None and mark is not None:
        arena.rewind(mark)
    return made()


def asked_once(ask: Callable[[int], bool]) -> Callable[[int], bool]:
    """`ask`, asked once per call: a call made again (`with_room`) keeps the answer its first
    attempt was given, as the auditor answers each call once."""
    answers: dict[int, bool] = {}

    def asked(index: int) -> bool:
        if index not in answers:
            answers[index] = ask(index)
        return answers[index]

    return asked
