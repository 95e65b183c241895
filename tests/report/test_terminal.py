"""What the terminal says of findings: whole items of evidence (never JSON cut inside a key),
counts that add up, only the cases that failed, and CPU timings said once for all."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from kernelaudit.checks.base import Probe
from kernelaudit.demo import ExampleCandidate
from kernelaudit.findings import AuditReport, Finding
from kernelaudit.inputs.case import Case
from kernelaudit.report.terminal import cpu_timings_left_out, expectations_table, print_findings


def _finding(
    check: str = "numerics",
    key: str = "error:y",
    severity: str = "fail",
    evidence: tuple = (),
    occurrences: int = 2,
    probes: int = 36,
) -> Finding:
    return Finding(
        id="F1",
        check=check,
        key=key,
        severity=severity,  # type: ignore[arg-type]
        title="y: normwise error 0.01 is 40x the noise floor",
        evidence=evidence,
        probe=Probe(check, Case((("rows", 1), ("cols", 1)))),
        original=None,
        occurrences=occurrences,
        probes=probes,
    )


def _said(*reports: AuditReport) -> str:
    text = io.StringIO()
    console = Console(file=text, width=400, color_system=None)
    for report in reports:
        print_findings(console, report, "r.json")
    cpu_timings_left_out(console, list(reports))
    return text.getvalue()


def test_long_evidence_is_shown_item_by_item_and_the_rest_counted(
    report: Callable[..., AuditReport],
) -> None:
    metrics = {f"metric_{i:02d}": 0.1234567 * i for i in range(30)}
    said = _said(report(_finding(evidence=(("metrics", metrics),))))
    line = next(line for line in said.splitlines() if "metrics:" in line)
    shown = [item for item in line.split("metrics: ")[1].split("; ") if item.startswith("metric_")]
    assert all(item.count(": ") == 1 and len(item.split(": ")[1]) > 0 for item in shown)
    assert f"and {30 - len(shown)} more" in line
    assert '{"' not in said and "..." not in said


def test_counts_add_up(report: Callable[..., AuditReport]) -> None:
    assert "seen in 2 of 36 numerics case(s)" in _said(report(_finding()))
    said = _said(report(_finding(occurrences=47, probes=5)))
    assert "seen 47 times in 5 numerics case(s)" in said and "of 5" not in said


def test_only_the_cases_that_failed_are_listed(report: Callable[..., AuditReport]) -> None:
    cases = {"mask~masked_rows": "failed 1 of 1", "default values": "failed 0 of 1"}
    said = _said(report(_finding(evidence=(("cases", cases),))))
    assert "mask~masked_rows: failed 1 of 1" in said and "default values" not in said


def test_cpu_timings_are_left_to_the_reports_and_said_once(
    report: Callable[..., AuditReport],
) -> None:
    timing = _finding("timing", "times", "note")
    said = _said(report(timing), report(timing))
    assert "x speed-up" not in said and timing.title not in said
    assert said.count("say nothing of a GPU's speed") == 1
    on_a_gpu = _said(report(timing, device="cuda:0"))
    assert timing.title in on_a_gpu and "GPU's speed" not in on_a_gpu


def test_a_shrunk_finding_leads_with_its_worst_case_then_the_smallest(
    report: Callable[..., AuditReport],
) -> None:
    worst = {"case": "x~offset @ boundary cols=1 [float32]", "title": "y: error is 358x the floor"}
    finding = _finding(evidence=(("worst case", worst),))
    lines = _said(report(finding)).splitlines()
    headline = next(i for i, line in enumerate(lines) if "FAIL F1" in line)
    assert lines[headline].endswith("y: error is 358x the floor")
    assert "worst case: x~offset @ boundary cols=1 [float32]" in lines[headline + 1]
    assert "smallest failing case: rows=1 cols=1" in lines[headline + 2]
    assert lines[headline + 3].strip() == f"there: {finding.title}"


def test_the_demos_table_says_a_risk_this_device_cannot_show_beside_the_verdict(
    report: Callable[..., AuditReport],
) -> None:
    # the embedding gradient's atomics, audited on a CPU: a PASS this device could not confirm
    atomics = _finding("tripwires", "atomics:/e/candidates.py:45", "note")
    seen = report(
        atomics,
        unverified=(("tripwires", "atomics at candidates.py:45: only a run on a GPU can ..."),),
        unconfirmed=("tripwires",),
    )
    example = ExampleCandidate(Path("problem.py"), "candidates.py::scale", "PASS")
    text = io.StringIO()
    Console(file=text, width=400, color_system=None).print(
        expectations_table([example, example], [seen, report()], "quick")
    )
    said = text.getvalue()
    assert said.count("PASS (unconfirmed on cpu: tripwires)") == 1  # the first row alone
    assert said.count("PASS") == 4  # both rows' expected and verdict columns
