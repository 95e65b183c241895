"""Mask draws over the last dimension (a row is one query's keys, one token's candidates)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import torch

from kernelaudit.errors import UsageError
from kernelaudit.problem.domain import keep_at_least

KEEP_PROBABILITY = 0.75
MASKED_ROW_FRACTION = 0.25

MASK_DISTRIBUTIONS: Mapping[str, str] = MappingProxyType(
    {
        "random": (
            f"Each element kept with probability {KEEP_PROBABILITY}, at least one per row: "
            "masked positions scattered everywhere, never a row with nothing to attend to."
        ),
        "masked_rows": (
            f"Like random, with ~{MASKED_ROW_FRACTION:.0%} of rows (at least one) fully "
            "masked: a softmax over nothing must give what the reference gives (often NaN or "
            "zeros), not garbage from an uninitialised maximum."
        ),
        "all_kept": "Nothing masked: a kernel must not treat the mask as optional padding.",
    }
)


def _random_keep(rows: int, length: int, generator: torch.Generator) -> torch.Tensor:
    keep = torch.rand((rows, length), generator=generator, dtype=torch.float64) < KEEP_PROBABILITY
    if length == 0:
        return keep
    # Rows that drew nothing kept get one random position back, so "random" never contains a
    # fully masked row; that case has its own distribution.
    rescue = torch.randint(length, (rows, 1), generator=generator)
    empty = ~keep.any(dim=1, keepdim=True)
    rescued = torch.zeros_like(keep).scatter_(1, rescue, True) & empty
    return keep | rescued


def _masked_rows_keep(rows: int, length: int, generator: torch.Generator) -> torch.Tensor:
    keep = _random_keep(rows, length, generator)
    if rows == 0:
        return keep
    masked = torch.rand(rows, generator=generator, dtype=torch.float64) < MASKED_ROW_FRACTION
    if not masked.any():
        masked[int(torch.randint(rows, (), generator=generator))] = True
    return keep & ~masked.unsqueeze(1)


def _all_kept(rows: int, length: int, generator: torch.Generator) -> torch.Tensor:
    return torch.ones((rows, length), dtype=torch.bool)


_DRAWS = {"random": _random_keep, "masked_rows": _masked_rows_keep, "all_kept": _all_kept}

FULLY_MASKED = "masked_rows"
"""The draw with rows that keep nothing: not made for a mask whose callers keep some."""


def draw_mask(
    name: str,
    shape: tuple[int, ...],
    kind: str,
    dtype: torch.dtype,
    generator: torch.Generator,
    min_kept: int = 0,
) -> torch.Tensor:
    """A mask of distribution `name`, on the CPU, exactly `dtype`, keeping at least `min_kept`
    elements of every row (rows short of it keep their first positions too).

    kind "bool": True keeps an element. kind "additive": 0 keeps, -inf masks.
    """
    draw = _DRAWS.get(name)
    if draw is None:
        known = ", ".join(MASK_DISTRIBUTIONS)
        raise UsageError(f"unknown mask distribution {name!r}; choose one of: {known}")
    if kind not in ("bool", "additive"):
        raise UsageError(f"unknown mask kind {kind!r}; use 'bool' or 'additive'")
    if kind == "additive" and not dtype.is_floating_point:
        raise UsageError(
            f"an additive mask holds -inf and cannot be stored as {dtype}; declare it with a "
            "floating dtype such as torch.float32"
        )
    shape = tuple(shape)
    # A 0-d mask is one row of one element.
    length = shape[-1] if shape else 1
    rows = 1
    for size in shape[:-1]:
        rows *= size
    keep = keep_at_least(draw(rows, length, generator), min_kept).view(shape)
    if kind == "bool":
        return keep.to(dtype)
    return torch.zeros(shape, dtype=dtype).masked_fill_(~keep, float("-inf"))
