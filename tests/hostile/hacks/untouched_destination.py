"""Destination-passing: computes the product into a new tensor and rebinds the parameter `y` to
it, so the caller's preallocated `y` is never written."""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> None:
    # the bug itself: this rebinds a name and writes no element of the caller's tensor
    y = x @ w.T  # noqa: F841
