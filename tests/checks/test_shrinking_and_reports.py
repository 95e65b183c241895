"""Findings are shrunk to the smallest case that still fails, replay from their probe, and
survive a trip through the JSON report."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kernelaudit.checks.numerics import Numerics
from kernelaudit.engine.executor import Executor
from kernelaudit.findings import AuditReport, Finding, read_reports, write_reports
from kernelaudit.problem.load import load_problem
from kernelaudit.runner.auditor.process import Worker
from kernelaudit.runner.candidate import CandidateRef

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def flipped(tiny_audit: Callable[..., AuditReport]) -> AuditReport:
    # wrong only when there is a second row and the weight has two different ends
    return tiny_audit(
        "row_scale",
        "row_scale_kernels.py::flipped_weight_after_first_row",
        ["numerics"],
        shrink_budget=16,
        budget_s=30.0,  # its share for shrinking fits the 16 reruns on a CPU
    )


def test_a_failure_at_the_workload_shrinks_to_the_smallest_sizes_that_fail(
    flipped: AuditReport, finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    finding = finding_of(flipped, "numerics")
    assert "shrinking" not in dict(finding.evidence)  # within its budget's share
    original, shrunk = finding.original.size_map(), finding.probe.case.size_map()
    assert original == {"rows": 8, "cols": 16}
    assert all(shrunk[axis] <= original[axis] for axis in original)
    assert shrunk == {"rows": 2, "cols": 2}
    assert finding.shrink_steps
    assert finding.shrink_steps[-1] == "cols=2"
    assert finding.probe.case.label.endswith("(shrunk)")


def test_shrinking_spends_no_more_than_its_share_of_the_time_budget(
    tiny_audit: Callable[..., AuditReport], finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    # a budget whose share for shrinking (0.3 x 0.5 s, estimated) fits no rerun on a CPU
    report = tiny_audit(
        "row_scale",
        "row_scale_kernels.py::flipped_weight_after_first_row",
        ["numerics"],
        shrink_budget=16,
        budget_s=0.5,
    )
    finding = finding_of(report, "numerics")
    assert report.verdict == "FAIL"
    assert finding.shrink_steps == ()
    assert finding.probe.case == finding.original
    evidence = dict(finding.evidence)
    assert evidence["shrinking"].startswith("stopped before the simplest case: the audit's time")


def test_a_finding_that_echoes_another_checks_is_not_shrunk_but_its_cause_is(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    """The timing check judges its timed repetition's results again: wrong the same way as
    the judged call's, its finding is the numerics finding's symptom and is shown under it.
    Shrinking it would run the timed repetitions again at every simpler case (seconds each
    on a GPU) for a case the numerics finding has already shrunk to."""
    found = _wrong_everywhere(tiny_audit, ["numerics", "timing"])
    cause, echo = found["error:y"], found["timed-output:error:y"]
    assert cause.check == "numerics" and echo.check == "timing"
    assert cause.shrink_steps and cause.probe.case.size_map() == {"rows": 1, "cols": 1}
    assert echo.shrink_steps == ()
    assert echo.probe.case == echo.original
    said = dict(echo.evidence)["shrinking"]  # not cut short: not shrunk at all, and why
    assert said.startswith("not shrunk") and "'error:y'" in said


def test_a_finding_of_the_same_kind_is_shrunk_where_no_other_check_found_its_cause(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    # the timing check alone: its finding is the only one that says the results are wrong
    found = _wrong_everywhere(tiny_audit, ["timing"])
    assert found["timed-output:error:y"].shrink_steps


def _wrong_everywhere(
    tiny_audit: Callable[..., AuditReport], checks: list[str]
) -> dict[str, Finding]:
    """The failing findings, by key, of an audit of a row scale 1% off at every size."""
    report = tiny_audit(
        "row_scale",
        "row_scale_kernels.py::off_by_a_percent",
        checks,
        shrink_budget=16,
        budget_s=60.0,  # its share for shrinking fits every rerun on a CPU
    )
    return {f.key: f for f in report.findings if f.severity == "fail"}


def test_the_shrunk_probe_replays_the_failure(
    flipped: AuditReport, finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    finding = finding_of(flipped, "numerics")
    problem = load_problem(flipped.problem_path)
    candidate = CandidateRef(flipped.candidate_path, flipped.candidate_function)
    with Worker(candidate, "cpu", timeout_s=20.0) as worker:
        observation = Executor(problem, worker, "cpu").observe(finding.probe)
    assert [f.key for f in Numerics().judge(observation)] == [finding.key]


def test_a_report_read_back_from_json_holds_the_same_findings(
    tiny_audit: Callable[..., AuditReport], tmp_path: Path
) -> None:
    # a reused buffer gives a finding whose probe has a follow-up call, and a note
    report = tiny_audit(
        "identity", "identity_kernels.py::reused_buffer", ["aliasing", "numerics", "weak-cases"]
    )
    assert {f.severity for f in report.findings} == {"fail", "note"}
    write_reports([report], tmp_path / "report.json")
    (back,) = read_reports(tmp_path / "report.json")
    assert back.verdict == report.verdict
    assert [(f.id, f.check, f.key, f.severity, f.title) for f in back.findings] == [
        (f.id, f.check, f.key, f.severity, f.title) for f in report.findings
    ]
    for restored, finding in zip(back.findings, report.findings, strict=True):
        assert restored.probe == finding.probe
        assert restored.original == finding.original
        assert restored.shrink_steps == finding.shrink_steps
        assert restored.occurrences == finding.occurrences
    assert [(r.check, r.case, r.failures) for r in back.records] == [
        (r.check, r.case, r.failures) for r in report.records
    ]
