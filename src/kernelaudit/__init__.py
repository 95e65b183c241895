"""kernelaudit: audit GPU kernels against fp64 truth before they ship.

The problem-building names below, and `guard` (a kernel checked against its reference inside
the real job, `kernelaudit.guarding`), are imported on first use, so that `kernelaudit check` can
start its candidate's worker before this process has imported torch (`runner.auditor.prestart`)."""

from __future__ import annotations

import importlib
import time
from typing import TYPE_CHECKING

IMPORTED_AT = time.time()
"""When this process imported kernelaudit: a source file changed since is not the code it runs
(`training.kept` keeps nothing made by such a process)."""

if TYPE_CHECKING:
    from kernelaudit.guarding import Guard, guard, guard_autograd
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

__all__ = [
    "Axis",
    "Contract",
    "Domain",
    "Forward",
    "GeneratedInput",
    "Guard",
    "IndexInput",
    "MaskInput",
    "Output",
    "Problem",
    "Sampler",
    "ScalarInput",
    "TensorInput",
    "Workload",
    "guard",
    "guard_autograd",
]
_HOME = dict.fromkeys(__all__, "kernelaudit.problem.spec") | {
    "Domain": "kernelaudit.problem.domain",
    "Guard": "kernelaudit.guarding",
    "guard": "kernelaudit.guarding",
    "guard_autograd": "kernelaudit.guarding",
}
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
