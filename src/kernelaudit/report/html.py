"""The HTML report: one self-contained page (no scripts, no external assets) that gives, for
each candidate, failing ones first, the verdict and what it covers (what ran, what could not be
verified here and why, how the candidate was isolated), then every finding with its evidence
as tables and, where the evidence holds the data, figures: cases by value distribution and
size, error by row against its id's count, the failing region of an output, time per call
against the reference and the roofline, and the training check's curves and departures."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from kernelaudit.findings import AuditReport, Finding
from kernelaudit.report.case_grid import finding_grid, report_grid
from kernelaudit.report.causes import follow_ons
from kernelaudit.report.caveats import cpu_timing
from kernelaudit.report.evidence import evidence_html, value_text
from kernelaudit.report.page import counts_html, document, escape, severity_counts, table
from kernelaudit.report.plots import load, svg
from kernelaudit.report.plots.cases import case_grid_figure
from kernelaudit.report.plots.region import region_figure, region_of
from kernelaudit.report.plots.rows import row_figure, row_plot
from kernelaudit.report.plots.timing import timing_figure
from kernelaudit.report.plots.training import departure_figure, loss_figure
from kernelaudit.report.seal import write_atomically

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_SEVERITY_ORDER = {"fail": 0, "warn": 1, "note": 2}
_CASE_WORDS = {"fail": "smallest failing case", "warn": "case warned on", "note": "case"}
_VERBS = {"fail": "failed", "warn": "warned on", "note": "noted on"}


def write_html(reports: list[AuditReport], path: Path, sections: Sequence[str | None] = ()) -> None:
    """Write every report to one HTML file at `path`, failing candidates first. `sections`:
    any report's section already drawn (`section`, by the report's position; None or "" where
    not)."""
    write_atomically(path, page(reports, sections))


def page(reports: list[AuditReport], sections: Sequence[str | None] = ()) -> str:
    """The HTML of the report page for `reports` (`sections` as for `write_html`)."""
    order = sorted(range(len(reports)), key=lambda k: reports[k].verdict != "FAIL")
    ordered = [reports[k] for k in order]
    anchors = [_anchor(k) for k in order]
    drawn = [sections[k] if k < len(sections) else None for k in order]
    failing = sum(r.verdict == "FAIL" for r in ordered)
    body = [
        "<h1>kernelaudit report</h1>",
        f"<p>{len(ordered)} candidate(s): {failing} FAIL, {len(ordered) - failing} PASS.</p>",
        _summary(ordered, anchors),
        *(d or _report(r, a) for r, a, d in zip(ordered, anchors, drawn, strict=True)),
    ]
    title = "kernelaudit: " + ", ".join(f"{r.candidate} {r.verdict}" for r in ordered[:3])
    return document(title, "".join(body))


def section(report: AuditReport, position: int) -> str:
    """The part of the page that `report` takes as the report at `position` (0 for the first)
    among those `page` is given: drawn on its own, where the report is made, it saves the page
    its figures."""
    return _report(report, _anchor(position))


def _anchor(position: int) -> str:
    return f"candidate-{position + 1}"


def _summary(reports: list[AuditReport], anchors: list[str]) -> str:
    rows = [
        [
            escape(r.problem),
            f"<a href='#{a}'>{escape(r.candidate)}</a>",
            _verdict(r),
            escape(", ".join(sorted({f.check for f in r.failures})) or "-"),
            counts_html(severity_counts(r.findings)),
            str(len(r.records)),
            f"{r.seconds:.1f}",
        ]
        for r, a in zip(reports, anchors, strict=True)
    ]
    head = ["problem", "candidate", "verdict", "failing checks", "findings", "cases", "seconds"]
    return table(head, rows)


def _verdict(report: AuditReport) -> str:
    """The verdict, and the checks that found a risk of the candidate's own they could not
    confirm or rule out on this device (a side stream or atomics seen on a CPU), as the
    terminal's table says them."""
    said = f"<span class='{report.verdict}'>{report.verdict}</span>"
    if report.unconfirmed:
        checks = ", ".join(report.unconfirmed)
        said += f" <span class='muted'>(unconfirmed on {escape(report.device)}: {checks})</span>"
    return said


def _report(report: AuditReport, anchor: str) -> str:
    source = f"{report.candidate_path}::{report.candidate_function}"
    parts = [
        f"<h2 id='{anchor}'>{escape(report.candidate)} on {escape(report.problem)}: "
        f"{_verdict(report)}</h2>",
        f"<p class='muted'>candidate {escape(source)}; problem {escape(report.problem_path)}; "
        f"profile {escape(report.profile)}; device {escape(report.device)}; "
        f"{len(report.records)} cases in {report.seconds:.1f} s</p>",
        "<h3>What ran and what this verdict covers</h3>",
        _coverage(report),
    ]
    grid = report_grid(report)
    if grid is not None:
        parts.append(_figure(f"{anchor}-cases", lambda: case_grid_figure(grid)))
    parts.append(_details(report))
    findings = sorted(report.findings, key=lambda f: _SEVERITY_ORDER.get(f.severity, 3))
    parts.append(
        f"<h3>Findings</h3><p>{counts_html(severity_counts(findings)) if findings else 'none'}</p>"
    )
    parts.extend(_finding(report, f, anchor) for f in findings)
    return "".join(parts)


def _coverage(report: AuditReport) -> str:
    if report.confined:
        isolation = f"<p>Isolation: {escape(report.isolation)}.</p>"
    else:
        isolation = (
            f"<p class='caution'>Isolation: {escape(report.isolation or 'not recorded')}. "
            "The candidate ran without a sandbox: a hostile candidate could read or change what "
            "the audit reads and writes.</p>"
        )
    ran = [check for check, what in report.coverage if what == "ran"]
    parts = [isolation]
    if ran:
        parts.append(f"<p>Ran in full ({len(ran)} checks): {escape(', '.join(ran))}.</p>")
    gaps = [
        [escape(check), escape(what.split(":", 1)[0]), escape(what.partition(": ")[2] or what)]
        for check, what in report.coverage
        if what != "ran"
    ]
    said = {check for check, what in report.coverage if what != "ran"}
    gaps += [
        [escape(check), "not verified here", escape(why)]
        for check, why in report.unverified
        if check not in said
    ]
    if gaps:
        parts.append("<p><b>What this verdict does not cover</b></p>")
        parts.append(table(["check", "what happened", "why"], gaps))
    parts.append(_budget(report))
    if report.assumed:
        assumed = "; ".join(f"{name} {what}" for name, what in report.assumed)
        parts.append(
            f"<p>Assumed of the inputs (values outside it not tried): {escape(assumed)}</p>"
        )
    for line in report.interpretation:
        parts.append(f"<p>How the problem's format was read: {escape(line)}</p>")
    if report.workload_errors:
        columns = list(dict.fromkeys(c for _, e in report.workload_errors for c in e))
        rows = [
            [escape(w)] + [value_text(c, e[c]) if c in e else "" for c in columns]
            for w, e in report.workload_errors
        ]
        parts.append("<p><b>Plain errors at each workload</b> (what a benchmark prints)</p>")
        parts.append(table(["workload", *[c.replace("_", " ") for c in columns]], rows))
    return "".join(parts)


def _budget(report: AuditReport) -> str:
    budget = dict(report.budget)
    if not budget:
        return ""

    def said(key: str) -> str:
        return value_text(key, budget.get(key, 0))

    required = int(budget.get("probes_required_untried", 0))
    optional = value_text("probes_untried", budget.get("probes_untried", 0) - required)
    text = (
        f"<p>Plan: {said('probes_planned')} probes for a budget of {said('budget_s')} "
        f"(estimated {said('planned_s')} of probing); {optional} optional probes left untried"
        + (f", and {required} of the probes every audit runs" if required else "")
        + f"; {said('probes_sharing_a_run')} judged on another probe's run.</p>"
    )
    if report.untried:
        rows = [[escape(what), str(count)] for what, count in report.untried]
        text += table(["untried (check @ shape)", "probes"], rows)
    return text


def _details(report: AuditReport) -> str:
    """Where the time went and the environment, folded away."""
    parts = []
    for title, pairs in (
        ("phases", report.phases),
        ("seconds per check", report.check_seconds),
        ("judging seconds per check", report.judging_seconds),
        ("planning seconds, per check and the batch axes' inference", report.planning_seconds),
    ):
        rows = [[escape(k), f"{v:.2f}"] for k, v in sorted(pairs, key=lambda kv: -kv[1]) if v]
        if rows:
            parts.append(f"<p><b>{title}</b></p>" + table(["", "seconds"], rows))
    facts = [*report.environment, *((f"sha256 of the {k}", v) for k, v in report.files_sha256)]
    if facts:
        parts.append("<p><b>environment</b></p>")
        parts.append(table(["", ""], [[escape(k), escape(v)] for k, v in facts]))
    if not parts:
        return ""
    return f"<details><summary>where the time went; environment</summary>{''.join(parts)}</details>"


def _finding(report: AuditReport, finding: Finding, anchor: str) -> str:
    scope = f"{anchor}-{re.sub(r'[^A-Za-z0-9]+', '-', finding.id or finding.key)}"
    worst = finding.worst_case
    parts = [
        f"<div class='finding {finding.severity}'>",
        f"<h4><span class='badge {finding.severity}'>{finding.severity}</span> "
        f"{escape(finding.id)} [{escape(finding.check)}] {escape(finding.headline)}</h4>",
    ]
    cause = follow_ons(report).get(finding.id)
    if cause is not None:
        parts.append(
            f"<p>The same cause as {escape(cause[0].id)} [{escape(cause[0].check)}]: "
            f"{escape(cause[1])}, not a second bug.</p>"
        )
    if worst is not None:
        parts.append(f"<p>worst case: <code>{escape(str(worst['case']))}</code></p>")
    parts.append(_origin(finding))
    parts.extend(_finding_figures(report, finding, scope))
    parts.append(evidence_html(finding))
    parts.append("</div>")
    return "".join(parts)


def _origin(finding: Finding) -> str:
    """Where the finding was seen. Only a failing finding's case is its smallest failing one:
    a note or a warning names the case it was measured on."""
    if finding.probe is None:
        if finding.check == "training":
            return (
                "<p>Seen while training a small model with the candidate: no single case to "
                "replay.</p>"
            )
        return "<p>No single case to replay for this finding.</p>"
    case = finding.probe.case
    words = _CASE_WORDS.get(finding.severity, "case")
    text = f"<p>{words}: <code>{escape(case.describe())}</code>"
    if finding.original is not None and finding.original != case:
        text += f"; first seen in <code>{escape(finding.original.describe())}</code>"
    text += f"; {escape(finding.seen(_VERBS.get(finding.severity, 'seen in')))}"
    if finding.worst_case is not None:
        text += f", where: {escape(finding.title)}"
    if finding.shrink_steps:
        text += f"; shrunk by {escape(', '.join(finding.shrink_steps))}"
    if finding.severity == "fail":
        text += f". Replay: <code>kernelaudit repro &lt;JSON report&gt; {escape(finding.id)}</code>"
    return text + ".</p>"


def _finding_figures(report: AuditReport, finding: Finding, scope: str) -> list[str]:
    """The figures the finding's evidence has the data for."""
    evidence = dict(finding.evidence)
    drawn: list[str] = []
    grid = finding_grid(report, finding) if finding.severity == "fail" else None
    if grid is not None:
        drawn.append(_figure(f"{scope}-cases", lambda: case_grid_figure(grid)))
    curves = evidence.get("loss curves")
    if isinstance(curves, dict):
        for optimizer, curve in curves.items():
            name = re.sub(r"[^A-Za-z0-9]+", "-", str(optimizer))
            drawn.append(_figure(f"{scope}-{name}", partial(loss_figure, str(optimizer), curve)))
    if isinstance(evidence.get("per optimizer"), dict):
        drift = evidence.get("parameter drift")
        drawn.append(
            _figure(
                f"{scope}-departure",
                lambda: departure_figure(
                    evidence["per optimizer"], drift if isinstance(drift, dict) else {}
                ),
            )
        )
    rows = row_plot(finding)
    if rows is not None:
        drawn.append(_figure(f"{scope}-rows", lambda: row_figure(rows)))
    region = region_of(evidence)
    if region is not None:
        drawn.append(_figure(f"{scope}-region", lambda: region_figure(region, finding.title[:90])))
    if finding.check == "timing" and not cpu_timing(report, finding):
        drawn.append(_figure(f"{scope}-timing", lambda: timing_figure(evidence)))
    return [d for d in drawn if d]


def _figure(scope: str, draw: Callable[[], Figure | None]) -> str:
    """A drawn figure as inline SVG; "" when the data holds nothing to draw. A figure that
    cannot be drawn says why in its place: the rest of the report still stands."""
    try:
        load()  # after a load begun ahead of the report, never beside it
        figure = draw()
        if figure is None:
            return ""
        return f"<figure>{svg(figure, scope)}</figure>"
    except Exception as error:  # one figure's data must not cost the whole report
        return f"<p class='caution'>This figure could not be drawn: {escape(error)}</p>"
