"""Poison: what fills memory the candidate should write before it reads.

Two poisons are used so that an element the candidate never wrote differs between two runs on
identical inputs:

- "nan": NaN for floating and complex dtypes, the most negative value for signed integers
  (the largest for unsigned ones, whose minimum, 0, is too common a result), True for bool.
- "sentinel": a finite value drawn at random once per auditor process (`AUDIT_SENTINEL`, a
  magnitude between 1e3 and 3e4 with a random sign and fraction) rounded to the dtype, or three
  quarters of the largest finite value of the same sign where that is out of range (float8);
  for integers one byte derived from it (`sentinel_byte`), repeated;
  True for bool as well, so bool outputs cannot show unwritten elements this way. Drawn anew
  per audit, the value says nothing to a candidate that looks for a known constant; every call
  carries it to the worker (`Call.sentinel`), so the auditor and the worker agree.

While `PoisonMode` is active, every `torch.empty`, `torch.empty_like`, `torch.empty_strided`,
`Tensor.new_empty` and `Tensor.new_empty_strided` returns poisoned memory inside a guarded
buffer, so that scratch and outputs the candidate allocates are both poisoned and guarded.
Allocations Triton makes for itself (its benchmarks' cache flush, its interpreter's staging
tensors) are left alone.
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from kernelaudit.runner.boundary.guard import GuardedTensor, allocate

POISONS: tuple[str, ...] = ("nan", "sentinel")


def draw_sentinel() -> float:
    """A sentinel value: magnitude in [1e3, 3e4), random sign and fraction, from the OS's
    entropy (not the audit's seeded generators, which a candidate may know)."""
    draw = random.SystemRandom()
    return draw.choice((-1.0, 1.0)) * draw.uniform(1e3, 3e4)


AUDIT_SENTINEL = draw_sentinel()
"""This process's sentinel: the auditor's calls carry it to the worker that runs them."""

SCRUB_BYTE = 0xFF
"""What freed device memory is filled with: every float dtype reads it as NaN, signed integers
as -1."""

MAX_GUARDED_ALLOCATIONS = 256
MAX_GUARDED_BYTES = 8 << 30
"""Guarded allocations are held until the call ends, so their guards can be checked; past this
many, or this many bytes, in one call (an allocation in a loop), allocations are poisoned but
not guarded."""

_ALLOCATORS: frozenset[Callable[..., Any]] = frozenset(
    {
        torch.empty,
        torch.empty_like,
        torch.empty_strided,
        torch.Tensor.new_empty,
        torch.Tensor.new_empty_strided,
    }
)


def poison_value(
    poison: str, dtype: torch.dtype, sentinel: float | None = None
) -> bool | int | float:
    """The value `poison` fills a tensor of `dtype` with; `sentinel` defaults to this
    process's AUDIT_SENTINEL."""
    if poison not in POISONS:
        raise ValueError(f"unknown poison {poison!r}; expected one of {', '.join(POISONS)}")
    value = AUDIT_SENTINEL if sentinel is None else sentinel
    if dtype == torch.bool:
        return True
    if dtype.is_floating_point or dtype.is_complex:
        if poison == "nan":
            return float("nan")
        largest = torch.finfo(dtype).max
        return value if largest > abs(value) else math.copysign(0.75 * largest, value)
    info = torch.iinfo(dtype)
    if poison == "nan":
        return info.min if dtype.is_signed else info.max
    return int.from_bytes(bytes([sentinel_byte(value)]) * (info.bits // 8), "little")


def sentinel_byte(sentinel: float) -> int:
    """The byte integer tensors are filled with under the sentinel poison: one of 0x21..0x7C,
    none of 0x00, 0xFF, 0x7F or 0x80 (values that zeroed, saturated or sign-flipped memory
    holds anyway)."""
    return 0x21 + int(abs(sentinel) * 1000) % 0x5C


def fill_poison(tensor: torch.Tensor, poison: str, sentinel: float | None = None) -> None:
    tensor.fill_(poison_value(poison, tensor.dtype, sentinel))


class PoisonMode(TorchFunctionMode):
    """Poisons and guards the `torch.empty*` allocations made while it is active.

    `allocations` holds, in order, every guarded allocation (labelled "scratch k").
    """

    def __init__(self, poison: str, sentinel: float | None = None) -> None:
        super().__init__()
        poison_value(poison, torch.float32)  # rejects an unknown poison before the call
        self.poison = poison
        self.sentinel = sentinel
        self.allocations: list[GuardedTensor] = []
        self._held_bytes = 0

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: tuple[type, ...],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if func not in _ALLOCATORS or "out" in kwargs or not _plain_memory(result):
            return result
        if sys._getframe(1).f_globals.get("__name__", "").startswith("triton."):
            # Triton's own buffers (the cache flush of its benchmarks, its interpreter's
            # staging tensors) are not the candidate's memory.
            return result
        nbytes = result.numel() * result.element_size()
        if (
            len(self.allocations) >= MAX_GUARDED_ALLOCATIONS
            or self._held_bytes + nbytes > MAX_GUARDED_BYTES
        ):
            fill_poison(result, self.poison, self.sentinel)
            return result
        self._held_bytes += nbytes
        guarded = allocate(
            f"scratch {len(self.allocations)}",
            tuple(result.shape),
            tuple(result.stride()),
            result.dtype,
            result.device,
        )
        fill_poison(guarded.view, self.poison, self.sentinel)
        if result.requires_grad:
            guarded.view.requires_grad_()
        self.allocations.append(guarded)
        return guarded.view


def _plain_memory(result: object) -> bool:
    """Whether `result` is an ordinary strided tensor with elements in real memory."""
    return (
        type(result) is torch.Tensor
        and result.layout == torch.strided
        and result.device.type != "meta"
        and not result.is_quantized
        and result.numel() > 0
    )
