"""The unwritten check: output elements the candidate never writes, and results computed from
memory it never wrote, fail with how many elements and where."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from kernelaudit import Contract
from kernelaudit.findings import AuditReport, Finding
from kernelaudit.problem.spec import Problem

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("style", "candidate"),
    [("return", "skip_last_row"), ("destination", "skip_last_row_into")],
)
def test_a_row_never_written_fails_with_its_element_count(
    style: str,
    candidate: str,
    tiny_audit: Callable[..., AuditReport],
    fixture_problem: Callable[[str], Problem],
    finding_of: Callable[[AuditReport, str], Finding],
) -> None:
    problem = replace(fixture_problem("row_scale"), contract=Contract(style=style))
    report = tiny_audit(problem, f"row_scale_kernels.py::{candidate}", ["unwritten"])
    finding = finding_of(report, "unwritten")
    rows, cols = (finding.probe.case.size_map()[a] for a in ("rows", "cols"))
    evidence = dict(finding.evidence)
    assert report.verdict == "FAIL"
    assert finding.key == "unwritten:y"
    assert finding.title == f"'y': {cols} of {rows * cols} elements are never written"
    assert evidence["elements"] == cols
    assert evidence["dim 0 indices"] == f"{rows - 1}..{rows - 1} (1 of {rows})"


def test_accumulating_into_unzeroed_scratch_is_a_read_of_uninitialised_memory(
    tiny_audit: Callable[..., AuditReport], finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    report = tiny_audit("row_scale", "row_scale_kernels.py::accumulate_into_empty", ["unwritten"])
    finding = finding_of(report, "unwritten")
    rows, cols = (finding.probe.case.size_map()[a] for a in ("rows", "cols"))
    assert report.verdict == "FAIL"
    assert finding.key == "poison-dependence:y"
    assert finding.title.startswith(f"'y': {rows * cols} elements change with the poison")
    assert "reads of uninitialised memory" in finding.title


def test_a_nondeterministic_candidate_is_not_blamed_for_reading_uninitialised_memory(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    report = tiny_audit("row_scale", "row_scale_kernels.py::noisy", ["unwritten"])
    assert [f.title for f in report.findings if f.check == "unwritten"] == []


def test_a_candidate_that_writes_everything_costs_the_check_no_calls_of_its_own(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    # each boundary case is screened on the numerics sweep's plain run of it; only a result
    # holding the poison would be run again three times
    report = tiny_audit("row_scale", "row_scale_kernels.py::scale", ["numerics", "unwritten"])
    screened = [r.case for r in report.records if r.check == "unwritten"]
    swept = {r.case for r in report.records if r.check == "numerics"}
    assert report.verdict == "PASS"
    assert screened and all(case in swept for case in screened)
    assert len(screened) == len(set(screened))  # each case once: no three-call run followed
    assert dict(report.budget)["probes_sharing_a_run"] >= len(screened)
