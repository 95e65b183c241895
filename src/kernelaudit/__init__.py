"""kernelaudit: audit GPU kernels against fp64 truth before they ship.

The problem-building names below are imported on first use, so that `kernelaudit check` can
start its candidate's worker before this process has imported torch (`runner.prestart`)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelaudit.problem.domain import Domain
    from kernelaudit.problem.spec import (
        Axis,
        Contract,
        Forward,
        GeneratedInput,
        IndexInput,
        MaskInput,
        Output,
        Problem,
        Sampler,
        ScalarInput,
        TensorInput,
        Workload,
    )

_HOME = {
    "Axis": "kernelaudit.problem.spec",
    "Contract": "kernelaudit.problem.spec",
    "Domain": "kernelaudit.problem.domain",
    "Forward": "kernelaudit.problem.spec",
    "GeneratedInput": "kernelaudit.problem.spec",
    "IndexInput": "kernelaudit.problem.spec",
    "MaskInput": "kernelaudit.problem.spec",
    "Output": "kernelaudit.problem.spec",
    "Problem": "kernelaudit.problem.spec",
    "Sampler": "kernelaudit.problem.spec",
    "ScalarInput": "kernelaudit.problem.spec",
    "TensorInput": "kernelaudit.problem.spec",
    "Workload": "kernelaudit.problem.spec",
}

__all__ = [
    "Axis",
    "Contract",
    "Domain",
    "Forward",
    "GeneratedInput",
    "IndexInput",
    "MaskInput",
    "Output",
    "Problem",
    "Sampler",
    "ScalarInput",
    "TensorInput",
    "Workload",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'kernelaudit' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
