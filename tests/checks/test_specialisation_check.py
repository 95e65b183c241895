"""The specialisation check's shapes past the workloads: held back near each one, and one far
past the largest, where a kernel wrong only beyond the listed sizes shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelaudit.engine.audit import audit
from kernelaudit.problem.load import load_problem

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    ("candidate", "verdict"), [("wrong_past_twice_the_rows", "FAIL"), ("scale", "PASS")]
)
def test_a_kernel_wrong_only_far_past_the_workloads_fails_at_the_far_past_shape(candidate, verdict):
    problem = load_problem(FIXTURES / "row_scale.py")
    spec = f"{FIXTURES / 'size_bomb_kernels.py'}::{candidate}"
    report = audit(problem, spec, "default", "cpu", ["numerics", "specialisation"])
    assert report.verdict == verdict
    labels = {r.case.label for r in report.records if r.check == "specialisation"}
    assert "far past workload 0, rows x4" in labels
    if verdict == "FAIL":
        (finding,) = report.failures
        assert finding.check == "specialisation" and "far-past shape" in finding.title
