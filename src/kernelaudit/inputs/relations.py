"""Values one input's callers guarantee relative to another's: ids held below another index
input's values at the same leading positions (`Domain.below`), as positions within each
sequence's length are."""

from __future__ import annotations

import torch

from kernelaudit.inputs.layouts import expand_dim


def held_below(
    ids: torch.Tensor, limits: torch.Tensor, bound: int, layout: str = "contiguous"
) -> tuple[torch.Tensor, torch.Tensor]:
    """`ids` (drawn in [0, bound)) moved below `limits`, whose shape starts theirs: each id
    scaled from [0, bound) onto [0, min(limit, bound)), so a row's first and last ids stay
    first and last and its repeats stay repeats; and `limits` with every 0 raised to 1 (a row
    with ids has at least one its callers can pass). Where `layout` presents the ids with
    stride 0, the least limit along that stride stands for all of it, so the values shown
    stay below every limit."""
    limits = limits.clamp(min=1)
    shape = tuple(ids.shape)
    trailing = (1,) * (ids.dim() - limits.dim())
    per = limits.to(torch.int64).reshape(*limits.shape, *trailing).expand(shape)
    if layout == "broadcast" and per.numel():
        per = per.min().expand(shape)
    d = expand_dim(shape) if layout == "expanded" else None
    if d is not None:
        per = per.amin(dim=d, keepdim=True).expand(shape)
    moved = ids.to(torch.int64) * per.clamp(max=max(bound, 1)) // max(bound, 1)
    return moved.to(ids.dtype), limits
