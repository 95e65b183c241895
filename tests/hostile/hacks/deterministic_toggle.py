"""Switches `torch.use_deterministic_algorithms` on (warn-only) after its work and leaves it on:
a determinism check run after it sees the library's deterministic kernels, and every later
operation in the process may run a slower algorithm."""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = x @ w.T
    torch.use_deterministic_algorithms(True, warn_only=True)
    return out
