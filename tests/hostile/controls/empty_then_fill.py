"""Allocates its output with `torch.empty` and fills every element with
`torch.matmul(..., out=...)`: poisoned memory that is fully overwritten."""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
    torch.matmul(x, w.T, out=out)
    return out
