"""Readers that turn the files people already have into problems and candidates: kernelaudit's
own problem modules, SOL-ExecBench definitions and solutions, KernelBench models.

`read_problem`, `read_candidate` and `unrunnable` (in `readers`) are imported on first use, so
that a solution can be unpacked before torch is imported (`runner.auditor.prestart`)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelaudit.formats.readers import (
        PROBLEM_FORMATS,
        read_candidate,
        read_problem,
        unrunnable,
    )

__all__ = ["PROBLEM_FORMATS", "read_candidate", "read_problem", "unrunnable"]


def __getattr__(name: str) -> object:
    if name not in __all__:
        raise AttributeError(f"module 'kernelaudit.formats' has no attribute {name!r}")
    value = getattr(importlib.import_module("kernelaudit.formats.readers"), name)
    globals()[name] = value
    return value
