"""Runs one call behind, as a careless double-buffered pipeline does: each call returns the
result of the previous call of the same shape, which a benchmark repeating one input never
notices."""

from __future__ import annotations

import torch

_last: dict[tuple[object, ...], torch.Tensor] = {}


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    key = (x.shape, w.shape, x.dtype, x.device)
    previous = _last.get(key)
    _last[key] = x @ w.T
    return _last[key].clone() if previous is None else previous
