"""Saves an allocation by copying the product into the activation's own memory, when it fits,
and returning a view of it: the output shares storage with the input `x`."""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = x @ w.T
    if not x.is_contiguous() or x.numel() < out.numel():
        return out
    in_x = x.view(-1)[: out.numel()].view(out.shape)
    in_x.copy_(out)
    return in_x
