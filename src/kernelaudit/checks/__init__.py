"""Checks: one module per family, each a plug-in behind `checks.base.Check`.

Adding a check is one new module and one line in REGISTRY.
"""

from __future__ import annotations

from kernelaudit.checks.aliasing import Aliasing
from kernelaudit.checks.base import Check
from kernelaudit.checks.bounds import Bounds
from kernelaudit.checks.determinism import Determinism
from kernelaudit.checks.execution import Execution
from kernelaudit.checks.mutation import Mutation
from kernelaudit.checks.numerics import Numerics
from kernelaudit.checks.unwritten import Unwritten
from kernelaudit.checks.weak_cases import WeakCases
from kernelaudit.errors import UsageError

REGISTRY: tuple[type[Check], ...] = (
    # in order of diagnosis: the findings of earlier checks explain those of later ones
    Execution,
    Unwritten,
    Bounds,
    Mutation,
    Aliasing,
    Determinism,
    Numerics,
    WeakCases,
)


def build_checks(names: list[str] | None = None) -> list[Check]:
    """Instantiate the named checks (all of them when `names` is None). The execution check
    always runs: nothing else can be judged from a run that failed."""
    known = {cls.name: cls for cls in REGISTRY}
    if names is None:
        return [cls() for cls in REGISTRY]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown check {unknown[0]!r}; choose from: {', '.join(known)}")
    wanted = {"execution", *names}
    return [cls() for cls in REGISTRY if cls.name in wanted]
