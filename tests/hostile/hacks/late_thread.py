"""Returns at once and fills its output from a thread 50 ms later: a harness that reads the
result after its own synchronisation sees the right values, while the timed call covered none
of the work."""

from __future__ import annotations

import threading
import time

import torch


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)

    def finish() -> None:
        time.sleep(0.05)
        torch.matmul(x, w.T, out=out)

    threading.Thread(target=finish, daemon=True).start()
    return out
