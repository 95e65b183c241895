"""Caches a launch configuration (rows per block) by shape in a module-level dict, as autotuned
kernels do, and computes every block from the inputs of the call: state that is not data."""

from __future__ import annotations

import torch

_OUTPUT_ELEMENTS_PER_BLOCK = 1 << 10

_rows_per_block: dict[tuple[int, int, int], int] = {}


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    (m, k), n = x.shape, w.shape[0]
    rows = _rows_per_block.setdefault((m, n, k), max(1, _OUTPUT_ELEMENTS_PER_BLOCK // n))
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    for start in range(0, m, rows):
        torch.matmul(x[start : start + rows], w.T, out=out[start : start + rows])
    return out
