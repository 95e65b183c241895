"""Turns on `torch.backends.cuda.matmul.allow_tf32` inside the call and leaves it on: its own
matmul gets 10-bit mantissas, and so does every later float32 matmul in the process, a
same-process reference's included."""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    torch.backends.cuda.matmul.allow_tf32 = True
    return x @ w.T
