"""Queues its work on a side stream behind a long `torch.cuda._sleep` and returns without making
the caller's stream wait: a timer on the current stream stops before the work has even started."""

from __future__ import annotations

import torch

_SLEEP_CYCLES = 50_000_000
"""About 30 ms at an H100's clock."""


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
    with torch.cuda.stream(torch.cuda.Stream(device=x.device)):
        torch.cuda._sleep(_SLEEP_CYCLES)
        torch.matmul(x, w.T, out=out)
    return out
