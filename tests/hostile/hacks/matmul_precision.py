"""Calls `torch.set_float32_matmul_precision("medium")` inside the call and leaves it set:
float32 matmuls in the whole process, a same-process reference's included, may then run in
bfloat16."""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    torch.set_float32_matmul_precision("medium")
    return x @ w.T
