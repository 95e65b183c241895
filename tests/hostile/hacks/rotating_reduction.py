"""Starts its reduction at a different offset on every call, as a split-K kernel whose partial
sums land in arrival order does: identical inputs give results that differ in the last bits."""

from __future__ import annotations

import itertools

import torch

_calls = itertools.count()


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    shift = next(_calls) % x.shape[1]
    return torch.roll(x, shift, 1) @ torch.roll(w, shift, 1).T
