"""Correct candidates pass every check, across every value distribution and layout: no check
may fail a kernel that computes what the reference computes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from kernelaudit import Contract
from kernelaudit.checks import REGISTRY
from kernelaudit.findings import AuditReport
from kernelaudit.problem.spec import LAYOUTS, Problem
from kernelaudit.profiles import PROFILES

pytestmark = pytest.mark.slow

ALL_CHECKS = [check.name for check in REGISTRY]
VALUES = PROFILES["default"].float_distributions


@pytest.mark.parametrize(
    ("problem", "contract", "candidate"),
    [
        ("row_scale", None, "row_scale_kernels.py::scale"),
        ("row_scale", Contract(style="destination"), "row_scale_kernels.py::scale_into"),
        ("identity", None, "identity_kernels.py::copy"),
    ],
)
def test_a_correct_candidate_passes_every_check(
    problem: str,
    contract: Contract | None,
    candidate: str,
    tiny_audit: Callable[..., AuditReport],
    fixture_problem: Callable[[str], Problem],
) -> None:
    loaded = fixture_problem(problem)
    if contract is not None:
        loaded = replace(loaded, contract=contract)
    report = tiny_audit(
        loaded,
        candidate,
        ALL_CHECKS,
        float_distributions=VALUES,
        layouts=tuple(layout for layout in LAYOUTS if layout != "contiguous"),
    )
    failing = [f"{f.check}: {f.title}" for f in report.findings if f.severity != "note"]
    assert failing == []
    assert report.verdict == "PASS"
    planned_by = {r.check for r in report.records}
    assert {"unwritten", "aliasing", "determinism", "numerics"} <= planned_by
    assert any(r.case.layouts for r in report.records)
