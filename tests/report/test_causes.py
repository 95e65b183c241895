"""One finding per root cause: a timed repetition's or a lone row's results wrong the same way
as the judged call's are shown under that finding, not as a second bug (a wrong timed result
would otherwise read as timer gaming); what else a check found stays on its own."""

from __future__ import annotations

import io
from collections.abc import Callable

from rich.console import Console

from kernelaudit.checks.base import Probe
from kernelaudit.findings import AuditReport, Finding, cause_of
from kernelaudit.inputs.case import Case
from kernelaudit.report.causes import follow_ons
from kernelaudit.report.terminal import print_findings, verdict_table


def _fail(id: str, check: str, key: str, title: str) -> Finding:
    return Finding(
        id=id,
        check=check,
        key=key,
        severity="fail",
        title=title,
        evidence=(),
        probe=Probe(check, Case((("rows", 2),))),
        original=None,
        occurrences=1,
        probes=1,
    )


ROOT = _fail("F1", "numerics", "error:y", "y: error 40x the floor")
TIMED = _fail("F2", "timing", "timed-output:error:y", "the timed repetition's results are wrong")
ALONE = _fail("F3", "batch-invariance", "alone-error:y", "rows[3] computed alone: y: error")
GAMED = _fail("F4", "timing", "timed-differs:y", "output 'y' of timed repetition 2 differs")


def _said(audit: AuditReport) -> str:
    text = io.StringIO()
    console = Console(file=text, width=300, color_system=None)
    console.print(verdict_table([audit]))
    print_findings(console, audit, "r.json", limit=5)
    return text.getvalue()


def test_results_wrong_the_same_way_elsewhere_fold_under_their_cause(
    report: Callable[..., AuditReport],
) -> None:
    audit = report(ROOT, TIMED, ALONE, GAMED, device="cuda:0")
    assert set(follow_ons(audit)) == {"F2", "F3"}
    said = _said(audit)
    assert "FAIL F1 [numerics]" in said and "FAIL F4 [timing]" in said
    assert "FAIL F2" not in said and "FAIL F3" not in said
    assert "the same cause: F2 [timing] (its timed repetitions' results are wrong" in said
    assert "the same cause: F3 [batch-invariance] (its rows computed alone" in said
    # the timing check failed on its own account too (F4): it stays in the table
    assert "numerics, timing" in said and "batch-invariance" not in said.split("FAIL F1")[0]


def test_an_echo_without_its_cause_is_a_finding_of_its_own(
    report: Callable[..., AuditReport],
) -> None:
    audit = report(TIMED, GAMED, device="cuda:0")
    assert follow_ons(audit) == {}
    said = _said(audit)
    assert "FAIL F2 [timing]" in said and "same cause" not in said


def test_the_html_report_says_which_finding_is_the_cause(
    report: Callable[..., AuditReport],
) -> None:
    from kernelaudit.report.html import page

    html = page([report(ROOT, TIMED, GAMED, device="cuda:0")])
    assert html.count("The same cause as F1 [numerics]") == 1  # F2 only: F4 is its own bug


def test_an_echo_is_told_by_its_key_and_another_checks_failing_cause() -> None:
    failing = {"error:y": "numerics", "call:tf32": "global-state"}
    said = cause_of("timed-output:error:y", "timing", failing)
    assert said is not None and said[0] == "error:y"
    # the flags read again in a plain process echo the global-state check's finding
    assert cause_of("unwatched-state:tf32", "unwatched", failing) == (
        "call:tf32",
        "a plain process shows the same change",
    )
    # no failing finding with its cause's key (a warning is not a cause): not an echo
    assert cause_of("timed-output:error:z", "timing", failing) is None
    # a check does not echo itself
    assert cause_of("alone-error:y", "numerics", failing) is None
    # a key of no echoing kind
    assert cause_of("timed-differs:y", "timing", failing) is None
