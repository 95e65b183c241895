"""The mutation check: writing an input fails naming it, unless the contract lets the candidate
write it; then the input's values after the call are compared with the reference's."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kernelaudit.findings import AuditReport, Finding

pytestmark = pytest.mark.slow

IN_PLACE = "scale_in_place_kernels.py::scale_x_in_place"


def test_writing_an_input_the_contract_does_not_allow_fails_naming_it(
    tiny_audit: Callable[..., AuditReport], finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    report = tiny_audit("row_scale", IN_PLACE, ["mutation", "numerics"])
    finding = finding_of(report, "mutation")
    evidence = dict(finding.evidence)
    sizes = finding.probe.case.size_map()
    assert report.verdict == "FAIL"
    assert finding.key == "mutated:x"
    assert evidence["input"] == "x"
    assert finding.title.startswith("input 'x' was modified")
    assert "the contract does not allow writing it" in finding.title
    assert 0 < evidence["elements changed"] <= sizes["rows"] * sizes["cols"]
    assert evidence["before"] != evidence["after"]
    # y itself is right: only the write into x is wrong
    assert [f.check for f in report.findings] == ["mutation"]


def test_the_same_writes_pass_when_the_contract_allows_them(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    report = tiny_audit(
        "scale_in_place",
        IN_PLACE,
        ["mutation", "numerics", "unwritten", "aliasing", "determinism"],
        layouts=("transposed", "strided", "offset"),
    )
    assert report.verdict == "PASS"
    assert report.findings == ()
    assert any(r.case.layouts == (("x", "strided"),) for r in report.records)


def test_allowed_writes_that_differ_from_the_references_fail_the_numerics(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    report = tiny_audit(
        "scale_in_place", "scale_in_place_kernels.py::scale_x_twice", ["mutation", "numerics"]
    )
    assert report.verdict == "FAIL"
    failing = {f.key: f for f in report.findings}
    assert "error:x (after call)" in failing
    assert failing["error:x (after call)"].title.startswith("x (after call): ")
    assert all(f.check == "numerics" for f in report.findings)
