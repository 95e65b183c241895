"""Splits the rows over a thread pool and joins it (leaving the `with` block) before returning:
threads that finish their work inside the call."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

_THREADS = 4


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
    step = -(-x.shape[0] // _THREADS)

    def rows(start: int) -> None:
        torch.matmul(x[start : start + step], w.T, out=out[start : start + step])

    with ThreadPoolExecutor(max_workers=_THREADS) as pool:
        list(pool.map(rows, range(0, x.shape[0], step)))
    return out
