"""Allocates host memory in 1 GiB chunks of real, touched pages (up to 64 GiB) and holds it,
as a leak or an unbounded host-side cache does."""

from __future__ import annotations

import torch

_held: list[torch.Tensor] = []


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    for _ in range(64):
        _held.append(torch.ones(1 << 28, dtype=torch.float32, device="cpu"))
    return x @ w.T
