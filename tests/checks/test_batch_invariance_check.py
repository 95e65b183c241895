"""The batch-invariance check: a row computed alone must equal the same row inside a batch, bit
for bit where the contract says batch_invariant, within the error budget otherwise."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from kernelaudit import Contract
from kernelaudit.checks.base import PlanContext
from kernelaudit.checks.batch_invariance import BatchInvariance
from kernelaudit.errors import UsageError
from kernelaudit.findings import AuditReport, Finding
from kernelaudit.problem.load import load_problem
from kernelaudit.problem.spec import Problem
from kernelaudit.profiles import PROFILES

pytestmark = pytest.mark.slow

BIT_EXACT = Contract(batch_invariant=True)


def test_a_row_summed_in_another_order_when_alone_fails_a_batch_invariant_contract(
    tiny_audit: Callable[..., AuditReport],
    fixture_problem: Callable[[str], Problem],
    finding_of: Callable[[AuditReport, str], Finding],
) -> None:
    problem = replace(fixture_problem("row_softmax"), contract=BIT_EXACT)
    report = tiny_audit(
        problem, "row_softmax_kernels.py::split_sum_when_alone", ["batch-invariance"]
    )
    finding = finding_of(report, "batch-invariance")
    evidence = dict(finding.evidence)
    assert report.verdict == "FAIL"
    assert finding.key == "batch-variant:y"
    assert "computed alone differs from the same row in a batch of" in finding.title
    assert evidence["axis"] == "rows"
    assert 0 < evidence["differing elements"] <= 64
    assert evidence["first index"][0] == evidence["row"]
    assert 0 < evidence["largest difference"] < 1e-6


def test_without_the_contract_the_same_candidate_passes_with_a_note(
    tiny_audit: Callable[..., AuditReport], finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    report = tiny_audit(
        "row_softmax", "row_softmax_kernels.py::split_sum_when_alone", ["batch-invariance"]
    )
    finding = finding_of(report, "batch-invariance")
    assert report.verdict == "PASS"
    assert finding.severity == "note"
    assert finding.key == "batch-variant-bits:y"
    assert "does not declare batch_invariant" in finding.title


def test_a_lone_row_computed_in_half_precision_fails_the_error_budget(
    tiny_audit: Callable[..., AuditReport], finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    report = tiny_audit(
        "row_softmax", "row_softmax_kernels.py::half_precision_when_alone", ["batch-invariance"]
    )
    finding = finding_of(report, "batch-invariance")
    assert report.verdict == "FAIL"
    assert finding.key == "alone-error:y"
    assert finding.title.startswith("rows[")
    assert "computed alone: y: " in finding.title


def test_a_candidate_that_computes_every_row_alike_passes_a_batch_invariant_contract(
    tiny_audit: Callable[..., AuditReport], fixture_problem: Callable[[str], Problem]
) -> None:
    problem = replace(fixture_problem("row_softmax"), contract=BIT_EXACT)
    report = tiny_audit(problem, "row_softmax_kernels.py::softmax", ["batch-invariance"])
    assert report.verdict == "PASS"
    assert report.findings == ()
    # the whole batch, then its last row and a middle one alone, along rows only (cols is
    # reduced): one probe
    assert [r.check for r in report.records] == ["batch-invariance"]


def test_the_profile_chooses_the_rows_computed_alone() -> None:
    problem = load_problem(Path(__file__).parent / "fixtures" / "row_scale.py")

    def alone(profile: str, **fields: object) -> list[tuple[str, int, int] | None]:
        chosen = replace(PROFILES[profile], **fields)  # type: ignore[arg-type]
        probes = BatchInvariance().plan(PlanContext(problem, chosen, "cpu", 1))
        return [s.case.rows for p in probes for s in p.plan.steps if s.case is not None]

    # every batch axis, its last row and a middle one, each alone
    assert alone("default") == [("rows", 6, 7), ("rows", 3, 4), ("cols", 12, 13), ("cols", 6, 7)]
    assert alone("quick") == [("rows", 8, 9)]  # the first axis, its last row
    assert alone("default", invariance_rows=("middle",)) == [("rows", 3, 4), ("cols", 6, 7)]
    with pytest.raises(UsageError, match="invariance_rows"):
        replace(PROFILES["default"], invariance_rows=("first",))
