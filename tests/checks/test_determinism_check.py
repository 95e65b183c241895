"""The determinism check: runs on identical inputs must agree bit for bit, unless the problem
declares itself nondeterministic; then every run is held to the error budget."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from kernelaudit import Contract
from kernelaudit.findings import AuditReport, Finding
from kernelaudit.oracle.rule import RATIO_LIMIT
from kernelaudit.problem.spec import Problem

pytestmark = pytest.mark.slow


def test_run_to_run_noise_fails_a_deterministic_problem(
    tiny_audit: Callable[..., AuditReport], finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    report = tiny_audit("row_scale", "row_scale_kernels.py::noisy", ["determinism"])
    finding = finding_of(report, "determinism")
    evidence = dict(finding.evidence)
    assert report.verdict == "FAIL"
    assert finding.key == "nondeterministic:y"
    assert "run 2 on identical inputs differs from run 1" in finding.title
    assert evidence["output"] == "y"
    assert evidence["differing elements"] >= 1


@pytest.mark.parametrize(("candidate", "verdict"), [("noisy", "PASS"), ("very_noisy", "FAIL")])
def test_a_nondeterministic_problem_holds_each_run_to_the_error_budget(
    candidate: str,
    verdict: str,
    tiny_audit: Callable[..., AuditReport],
    fixture_problem: Callable[[str], Problem],
) -> None:
    problem = replace(fixture_problem("row_scale"), contract=Contract(deterministic=False))
    report = tiny_audit(problem, f"row_scale_kernels.py::{candidate}", ["determinism"])
    assert report.verdict == verdict
    if verdict == "FAIL":
        (finding,) = report.findings
        metrics = dict(finding.evidence)["metrics"]
        assert finding.key == "repeat-error:error:y"
        assert finding.title.startswith("run 2 of identical inputs: y: ")
        ratios = [metrics[f"{m}_error_ratio"] for m in ("normwise", "worst_row", "componentwise")]
        assert max(ratios) > RATIO_LIMIT
    else:
        assert report.findings == ()
