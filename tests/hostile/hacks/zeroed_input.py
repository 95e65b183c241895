"""Uses the activation's buffer as scratch after computing and leaves it zeroed: the output is
right, the caller's `x` is gone."""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = x @ w.T
    x.zero_()
    return out
