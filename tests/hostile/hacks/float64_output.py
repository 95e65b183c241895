"""Computes and returns float64 where float32 is declared: more accurate, twice the bytes, and a
tolerance check that casts both sides to one dtype never notices."""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.double() @ w.double().T
