"""Behaviour at the edges: extra outputs, scalar results, candidates that always hang."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kernelaudit.findings import AuditReport

pytestmark = pytest.mark.slow


def test_an_undeclared_reused_output_fails_without_breaking_the_audit(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    report = tiny_audit(
        "row_scale", "row_scale_kernels.py::extra_reused_output", ["aliasing", "determinism"]
    )
    titles = [f.title for f in report.failures]
    assert report.verdict == "FAIL"
    assert any("returned 2 tensor(s)" in t for t in titles), titles
    assert any("output 1" in t and "changed" in t for t in titles), titles


def test_a_scalar_result_is_not_called_weak_for_being_constant(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    report = tiny_audit("total", "total_kernels.py::total", ["numerics", "weak-cases"])
    assert report.verdict == "PASS"
    assert [f.title for f in report.findings if "constant" in f.title] == []


def test_a_scalar_result_goes_through_every_check_that_reads_its_bytes(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    checks = ["stale-memory", "unwritten", "determinism", "replay", "aliasing"]
    report = tiny_audit("total", "total_kernels.py::total", checks)
    judged = {record.check for record in report.records}
    assert report.verdict == "PASS", [f.title for f in report.failures]
    assert {"stale-memory", "unwritten", "determinism"} <= judged


def test_an_audit_stops_after_two_hangs_and_says_how_much_it_skipped(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    report = tiny_audit(
        "row_scale", "row_scale_kernels.py::always_hangs", ["numerics"], timeout_s=1.0
    )
    stopped = [f for f in report.findings if f.key == "stopped"]
    assert report.verdict == "FAIL"
    assert len(report.records) == 2
    assert stopped and stopped[0].severity == "warn"
    assert dict(stopped[0].evidence)["cases not run"] > 0
