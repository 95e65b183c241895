"""Audits of tiny plain-PyTorch problems (tests/checks/fixtures), sized so that one takes about
two seconds on a CPU, most of it starting the candidate's worker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from kernelaudit.engine.audit import audit
from kernelaudit.findings import AuditReport, Finding
from kernelaudit.problem.load import load_problem
from kernelaudit.problem.spec import Problem
from kernelaudit.profiles import PROFILES

FIXTURES = Path(__file__).parent / "fixtures"

TINY = replace(
    PROFILES["quick"],
    float_distributions=("normal",),
    boundary_sizes_per_axis=1,
    layouts=(),
    shrink_budget=4,
    timeout_s=20.0,
)
"""The workload and one boundary size per axis, default values and contiguous inputs: each test
adds back what its check needs."""


@pytest.fixture(scope="session")
def fixture_problem() -> Callable[[str], Problem]:
    """Load a problem of tests/checks/fixtures by its file stem ("row_scale")."""
    return lambda stem: load_problem(FIXTURES / f"{stem}.py")


@pytest.fixture(scope="session")
def tiny_audit() -> Callable[..., AuditReport]:
    """tiny_audit(problem, "kernels.py::function", checks, **profile_changes): an audit on the
    CPU with the TINY profile. `problem` is a Problem or the stem of a fixture file, and the
    candidate's file is in tests/checks/fixtures."""

    def run(
        problem: Problem | str, candidate: str, checks: list[str], **changes: object
    ) -> AuditReport:
        if isinstance(problem, str):
            problem = load_problem(FIXTURES / f"{problem}.py")
        profile = replace(TINY, **changes)  # type: ignore[arg-type]
        return audit(problem, str(FIXTURES / candidate), profile, "cpu", checks)

    return run


@pytest.fixture(scope="session")
def finding_of() -> Callable[[AuditReport, str], Finding]:
    """finding_of(report, check): the one finding of `check`; fails when there is not exactly
    one, listing what the report found instead."""

    def find(report: AuditReport, check: str) -> Finding:
        found = [f for f in report.findings if f.check == check]
        assert len(found) == 1, [f"{f.check} {f.severity}: {f.title}" for f in report.findings]
        return found[0]

    return find
