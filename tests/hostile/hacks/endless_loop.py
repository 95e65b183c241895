"""Never returns: a loop whose exit condition is never met, as a kernel spinning on a flag
nobody sets looks to its caller."""

from __future__ import annotations

from typing import NoReturn

import torch


def candidate(x: torch.Tensor, w: torch.Tensor) -> NoReturn:
    while True:
        pass
