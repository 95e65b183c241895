"""Allocates its output as raw `torch.UntypedStorage`, past any hook on `torch.empty`, and never
writes it: on a GPU the caching allocator hands back a block just freed, often holding the
previous call's (or the reference's) result."""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape[0], w.shape[0]
    storage = torch.UntypedStorage(rows * cols * x.element_size(), device=x.device)
    out = torch.tensor([], dtype=x.dtype, device=x.device)
    return out.set_(storage, 0, (rows, cols), (cols, 1))
