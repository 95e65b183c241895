"""Poison: what fills memory the candidate should write before it reads.

Two poisons are used so that an element the candidate never wrote differs between two runs on
identical inputs:

- "nan": NaN for floating and complex dtypes, the most negative value for signed integers
  (the largest for unsigned ones, whose minimum, 0, is too common a result), True for bool.
- "sentinel": -12345.6789 rounded to the dtype (-12344 in float16, -12352 in bfloat16), or
  three quarters of the most negative finite value where that is out of range (float8); the
  byte 0x5A repeated (0x5A5A5A5A for int32) for integers; True for bool as well, so bool
  outputs cannot show unwritten elements this way.

While `PoisonMode` is active, every `torch.empty`, `torch.empty_like`, `torch.empty_strided`,
`Tensor.new_empty` and `Tensor.new_empty_strided` returns poisoned memory inside a guarded
buffer, so that scratch and outputs the candidate allocates are both poisoned and guarded.
Allocations Triton makes for itself (its benchmarks' cache flush, its interpreter's staging
tensors) are left alone.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from kernelaudit.runner.guard import GuardedTensor, allocate

POISONS: tuple[str, ...] = ("nan", "sentinel")

SENTINEL_FLOAT = -12345.6789
SENTINEL_BYTE = 0x5A

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


def poison_value(poison: str, dtype: torch.dtype) -> bool | int | float:
    """The value `poison` fills a tensor of `dtype` with."""
    if poison not in POISONS:
        raise ValueError(f"unknown poison {poison!r}; expected one of {', '.join(POISONS)}")
    if dtype == torch.bool:
        return True
    if dtype.is_floating_point or dtype.is_complex:
        if poison == "nan":
            return float("nan")
        largest = torch.finfo(dtype).max
        return SENTINEL_FLOAT if largest > -SENTINEL_FLOAT else -0.75 * largest
    info = torch.iinfo(dtype)
    if poison == "nan":
        return info.min if dtype.is_signed else info.max
    return int.from_bytes(bytes([SENTINEL_BYTE]) * (info.bits // 8), "little")


def fill_poison(tensor: torch.Tensor, poison: str) -> None:
    tensor.fill_(poison_value(poison, tensor.dtype))


class PoisonMode(TorchFunctionMode):
    """Poisons and guards the `torch.empty*` allocations made while it is active.

    `allocations` holds, in order, every guarded allocation (labelled "scratch k").
    """

    def __init__(self, poison: str) -> None:
        super().__init__()
        poison_value(poison, torch.float32)  # rejects an unknown poison before the call
        self.poison = poison
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
            fill_poison(result, self.poison)
            return result
        self._held_bytes += nbytes
        guarded = allocate(
            f"scratch {len(self.allocations)}",
            tuple(result.shape),
            tuple(result.stride()),
            result.dtype,
            result.device,
        )
        fill_poison(guarded.view, self.poison)
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
