"""Copies CUDA inputs to the host and computes there: the values are right, but the output is a
CPU tensor, and the device-to-host round trip hides inside the call."""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.cpu() @ w.cpu().T
