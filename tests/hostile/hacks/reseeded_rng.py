"""Sums in a random order and reseeds the global generator (`torch.manual_seed`) on every call
so the order repeats: its run-to-run determinism is bought by resetting the caller's random
stream, CPU and CUDA."""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    torch.manual_seed(0)
    order = torch.randperm(x.shape[1], device=x.device)
    return x[:, order] @ w[:, order].T
