"""Loads the problem in its own process and patches what a same-process verifier would trust,
the problem's reference and kernelaudit's oracle comparison, to agree with it, then returns
zeros: the auditor's reference and oracle live in another process."""

from __future__ import annotations

import importlib
from pathlib import Path

import torch

import kernelaudit.oracle
from kernelaudit.oracle.compare import Comparison
from kernelaudit.problem.load import load_problem


def _zeros(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.zeros(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)


def _always_passes(name: str, *args: object, **kwargs: object) -> Comparison:
    return Comparison(name, "floating", passed=True)


_problem = load_problem(Path(__file__).resolve().parents[1] / "problems" / "linear.py")
object.__setattr__(_problem, "reference", _zeros)
importlib.import_module("kernelaudit.oracle.compare").compare = _always_passes
kernelaudit.oracle.compare = _always_passes


def candidate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return _zeros(x, w)
