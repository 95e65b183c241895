"""Its tail loop stores one element too many: it views the output's storage, which is larger
than the output, as one element longer (`as_strided`) and writes the padding."""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
    torch.matmul(x, w.T, out=out)
    n = out.numel()
    out.as_strided((n + 1,), (1,), out.storage_offset())[n] = 0.0
    return out
