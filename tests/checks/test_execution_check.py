"""The execution check: a candidate that raises, crashes, hangs or returns the wrong things fails
with the reason, and the audit carries on with the other cases."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kernelaudit.findings import AuditReport, Finding

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def raising(tiny_audit: Callable[..., AuditReport]) -> AuditReport:
    return tiny_audit("row_scale", "row_scale_kernels.py::raise_unless_multiple_of_4", ["numerics"])


def test_an_exception_fails_with_its_type_and_message(
    raising: AuditReport, finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    finding = finding_of(raising, "execution")
    evidence = dict(finding.evidence)
    assert raising.verdict == "FAIL"
    assert finding.title.startswith("the candidate raised an exception")
    assert evidence["kind"] == "exception"
    assert "ValueError: cols=" in evidence["message"]
    assert "is not a multiple of the vector width 4" in evidence["message"]
    # the traceback points into the candidate's own file, not the harness
    assert "row_scale_kernels.py" in evidence["message"]
    assert "kernelaudit/runner" not in evidence["message"]
    assert finding.probe.case.size_map()["cols"] % 4 != 0


def test_the_title_of_an_exception_names_the_exception(
    raising: AuditReport, finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    finding = finding_of(raising, "execution")
    assert "ValueError" in finding.title
    assert "is not a multiple of the vector width 4" in finding.title


def test_a_segfault_fails_as_a_crash_and_later_cases_still_run(
    tiny_audit: Callable[..., AuditReport], finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    report = tiny_audit(
        "row_scale",
        "row_scale_kernels.py::segfault_on_odd_cols",
        ["numerics"],
        layouts=("transposed",),
        shrink_budget=0,
    )
    finding = finding_of(report, "execution")
    assert report.verdict == "FAIL"
    assert "crashed" in finding.title
    assert "SIGSEGV" in finding.title
    assert finding.probe.case.size_map()["cols"] % 2 == 1
    crashed = [i for i, r in enumerate(report.records) if r.failures]
    assert crashed, "no case recorded the crash"
    # the worker was restarted: the cases planned after the crash ran and passed
    later = report.records[crashed[-1] + 1 :]
    assert later
    assert all(r.failures == () for r in later)
    assert any(r.case.layouts == (("x", "transposed"),) for r in later)


def test_a_hang_is_stopped_and_fails_as_a_timeout(
    tiny_audit: Callable[..., AuditReport], finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    report = tiny_audit(
        "row_scale", "row_scale_kernels.py::hang_on_one_row", ["determinism"], timeout_s=1.5
    )
    finding = finding_of(report, "execution")
    assert report.verdict == "FAIL"
    assert "did not return in time" in finding.title
    assert dict(finding.evidence)["kind"] == "timeout"
    assert finding.probe.case.size_map()["rows"] == 1
    workload = next(r for r in report.records if r.case.label == "workload 0")
    assert workload.failures == ()


def test_returning_more_tensors_than_declared_fails(
    tiny_audit: Callable[..., AuditReport], finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    report = tiny_audit("row_scale", "row_scale_kernels.py::with_row_sums", ["numerics"])
    finding = finding_of(report, "execution")
    evidence = dict(finding.evidence)
    assert report.verdict == "FAIL"
    assert finding.key == "output-count"
    assert "returned 2 tensor(s)" in finding.title
    assert evidence["returned"] == 2
    assert evidence["declared"] == ["y"]


def test_returning_none_breaks_the_calling_contract(
    tiny_audit: Callable[..., AuditReport], finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    report = tiny_audit("row_scale", "row_scale_kernels.py::returns_nothing", ["numerics"])
    finding = finding_of(report, "execution")
    assert report.verdict == "FAIL"
    assert "broke the calling contract" in finding.title
    assert "returned None" in finding.title
