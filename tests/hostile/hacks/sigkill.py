"""Kills its own process with SIGKILL, the way a driver fault or the kernel's out-of-memory
killer ends a process: nothing gets to report an exception."""

from __future__ import annotations

import os
import signal

import torch


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    os.kill(os.getpid(), signal.SIGKILL)
    return x @ w.T
