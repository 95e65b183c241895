"""The weak-cases check: cases where a trivial output would pass are noted, without failing the
candidate, and stronger cases are added to the sweep."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kernelaudit.findings import AuditReport, Finding

pytestmark = pytest.mark.slow


def test_cases_an_impostor_would_pass_are_noted_and_strengthened(
    tiny_audit: Callable[..., AuditReport], finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    # an identity: passing the input through is the right answer, so no case can tell them apart
    report = tiny_audit("identity", "identity_kernels.py::copy", ["numerics", "weak-cases"])
    note = finding_of(report, "weak-cases")
    evidence = dict(note.evidence)
    assert report.verdict == "PASS"
    assert note.severity == "note"
    assert evidence["impostor"] == "input 'x' passed through"
    assert "stronger cases were added" in note.title
    stronger = [r for r in report.records if r.case.label.endswith("(stronger values)")]
    assert {dict(r.case.values)["x"] for r in stronger} == {"offset", "small_integers"}
    assert all(r.check == "numerics" for r in stronger)
    # the stronger cases are real numerics cases: the correct candidate passes them
    assert not any(f.check == "numerics" for f in report.findings)
