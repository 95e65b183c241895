"""The aliasing check: an output sharing memory with an input, or handed out from a buffer the
candidate reuses on later calls, fails."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kernelaudit.findings import AuditReport, Finding

pytestmark = pytest.mark.slow


def test_returning_the_input_itself_shares_its_storage(
    tiny_audit: Callable[..., AuditReport], finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    report = tiny_audit("identity", "identity_kernels.py::passthrough", ["aliasing"])
    finding = finding_of(report, "aliasing")
    assert report.verdict == "FAIL"
    assert finding.title == "output 0 ('y') shares storage with input 0 ('x')"
    assert dict(finding.evidence)["alias"] == "output 0 ~ input 0"


def test_a_buffer_reused_across_calls_changes_results_already_returned(
    tiny_audit: Callable[..., AuditReport], finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    report = tiny_audit("identity", "identity_kernels.py::reused_buffer", ["aliasing"])
    finding = finding_of(report, "aliasing")
    assert report.verdict == "FAIL"
    assert finding.key == "changed-later:y"
    assert finding.title.startswith("output 'y' returned by call 0 changed when the candidate")
    assert "reuses" in finding.title
    # the probe calls again on fresh inputs of the same shape
    assert finding.probe.plan.followup is not None
    assert finding.probe.plan.followup.sizes == finding.probe.case.sizes


def test_an_output_may_be_an_input_the_contract_lets_the_candidate_write(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    report = tiny_audit(
        "scale_in_place",
        "scale_in_place_kernels.py::scale_x_and_return_it",
        ["aliasing", "mutation", "numerics"],
    )
    assert report.verdict == "PASS"
    assert report.findings == ()
