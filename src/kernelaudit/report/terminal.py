"""The terminal report: a progress bar while auditing, then a verdict table and the worst
findings with their numbers and the command that replays each one."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from kernelaudit.engine.progress import ProgressEvent
from kernelaudit.findings import AuditReport, Finding
from kernelaudit.report.causes import follow_ons
from kernelaudit.report.caveats import cpu_timing

if TYPE_CHECKING:
    from kernelaudit.demo import ExampleCandidate

_STYLE = {"PASS": "bold green", "FAIL": "bold red"}
_WHOLE = ("error",)
"""Evidence printed whole, never shortened: the error a user must read to act (a candidate
refused before its audit, `runner.auditor.preflight`)."""
_SEVERITY = {"fail": "red", "warn": "yellow", "note": "cyan"}

QUIET_S = 30.0
"""Off a terminal, the longest a log goes without a line while probes are being judged: a
check whose probes take minutes (a layer with billions of weight elements) still shows its
progress."""


@contextmanager
def progress_bar(console: Console) -> Iterator[Callable[[str, ProgressEvent], None]]:
    """What a user sees while an audit runs; yields the callback that takes each event with
    the label of the audit it belongs to.

    In a terminal, a live bar with the time elapsed and left. Anywhere else (a CI log, a
    corpus slot's log, a pipe), where a live bar shows nothing until the end, one line per
    phase and per check as it finishes, with its seconds and the audit's elapsed time, and
    the probe just judged whenever `QUIET_S` have passed without a line.
    """
    if not console.is_terminal:
        began = said = time.perf_counter()  # said: when the last line was printed

        def log(label: str, event: ProgressEvent) -> None:
            nonlocal said
            now = time.perf_counter()
            if event.kind == "probe":
                if now - said < QUIET_S:
                    return
                line = f"probe {event.done} of {event.total} judged: {escape(event.what)}"
            else:
                line = (
                    f"{event.kind} {escape(event.what)}: {event.seconds:.1f} s "
                    f"({event.total} probes)"
                )
            said = now
            console.print(f"[{now - began:7.1f} s] {escape(label)}  {line}", soft_wrap=True)

        yield log
        return
    columns = (
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        TextColumn("{task.description}"),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("", total=None)

        def update(label: str, event: ProgressEvent) -> None:
            what = f"{label}  {event.what}"
            bar.update(task, completed=event.done, total=event.total, description=escape(what[:90]))

        yield update


def verdict_table(reports: list[AuditReport]) -> Table:
    table = Table(title="kernelaudit verdicts", title_justify="left")
    for column in ("problem", "candidate", "verdict", "failures", "cases", "seconds"):
        table.add_column(column, justify="right" if column in ("cases", "seconds") else "left")
    for report in reports:
        folded = follow_ons(report)  # symptoms of another check's finding: listed with it
        table.add_row(
            escape(report.problem),
            escape(report.candidate),
            f"[{_STYLE[report.verdict]}]{report.verdict}[/]" + _unconfirmed(report),
            ", ".join(sorted({f.check for f in report.failures if f.id not in folded})) or "-",
            str(len(report.records)),
            f"{report.seconds:.1f}",
        )
    return table


def expectations_table(
    examples: list[ExampleCandidate], reports: list[AuditReport], profile: str
) -> Table:
    """Each bundled example's verdict against the one it expects, and the finding that names
    its bug (`kernelaudit demo`)."""
    table = Table(title=f"kernelaudit demo ({profile} profile)", title_justify="left")
    for column in ("problem", "candidate", "expected", "verdict", "finding that names the bug"):
        table.add_column(column)
    for example, report in zip(examples, reports, strict=True):
        met = example.met_by(report)
        expected = example.verdict + (f" ({', '.join(example.checks)})" if example.checks else "")
        top = next((f for f in report.failures if f.check in example.checks), None)
        top = top or (report.failures[0] if report.failures else None)
        table.add_row(
            escape(report.problem),
            escape(report.candidate.split("::")[-1]),
            expected,
            f"[{'green' if met else 'red'}]{report.verdict}{'' if met else ' (unexpected)'}[/]"
            + _unconfirmed(report),
            escape(f"{top.id} [{top.check}] {short(top.title, 90)}") if top else "-",
        )
    return table


def _unconfirmed(report: AuditReport) -> str:
    """What follows a verdict where checks found a risk of the candidate's own they could not
    confirm or rule out on this device (atomics seen on a CPU): "(unconfirmed on DEVICE:
    CHECKS)"; nothing otherwise."""
    if not report.unconfirmed:
        return ""
    return f" [yellow](unconfirmed on {escape(report.device)}: {', '.join(report.unconfirmed)})[/]"


def print_findings(
    console: Console, report: AuditReport, report_path: str | None, limit: int = 3
) -> None:
    """The worst findings of one report, each with its numbers and reproducer."""
    folded = follow_ons(report)
    shown = [f for f in report.failures if f.id not in folded][:limit]
    notes = [f for f in report.findings if f.severity != "fail" and not cpu_timing(report, f)]
    if not shown and not notes and not report.interpretation and not report.assumed:
        return
    console.print(f"\n[bold]{escape(report.candidate)}[/] on [bold]{escape(report.problem)}[/]")
    for line in report.interpretation:
        console.print(f"  [cyan]format[/] {escape(line)}", highlight=False)
    if report.assumed:
        said = "; ".join(f"{name} {what}" for name, what in report.assumed)
        console.print(f"  [cyan]assumed[/] {escape(said)}", highlight=False)
    for finding in shown:
        _print_finding(console, finding, report_path)
        for echo, (cause, said) in folded.items():
            if cause.id == finding.id:
                check = escape(f"[{report.finding(echo).check}]")
                console.print(f"       the same cause: {echo} {check} ({said})", highlight=False)
    hidden = len(report.failures) - len(shown) - len(folded)
    if hidden > 0:
        console.print(f"  ... and {hidden} more failing finding(s) in the JSON report")
    for finding in notes:
        colour = _SEVERITY[finding.severity]
        console.print(
            f"  [{colour}]{finding.severity}[/] {finding.id} "
            f"{escape(finding.title)} ({finding.occurrences} case(s))",
            highlight=False,
        )


def cpu_timings_left_out(console: Console, reports: list[AuditReport]) -> None:
    """Say once that the CPU audits' timing notes are in the reports only."""
    if any(cpu_timing(r, f) for r in reports for f in r.findings):
        console.print(
            "timings on a CPU (Triton through its interpreter) say nothing of a GPU's speed: "
            "they are in the reports, not shown here"
        )


def _print_finding(console: Console, finding: Finding, report_path: str | None) -> None:
    worst = finding.worst_case
    console.print(
        f"  [red]FAIL[/] [bold]{finding.id}[/] {escape(f'[{finding.check}]')} "
        f"{escape(finding.headline)}",
        highlight=False,
    )
    if finding.probe is None and finding.check == "training":
        console.print("       found by training a model with the candidate", highlight=False)
    elif finding.probe is None and finding.key == "files-changed":
        console.print("       found by reading the files again after the audit", highlight=False)
    elif finding.probe is None:
        console.print("       found in the candidate's source, before it ran", highlight=False)
    else:
        if worst is not None:
            console.print(f"       worst case: {escape(str(worst['case']))}", highlight=False)
        console.print(
            f"       {finding.seen()}; smallest failing case: "
            f"{escape(finding.probe.case.describe())}",
            highlight=False,
        )
        if worst is not None:
            console.print(f"       there: {escape(finding.title)}", highlight=False)
    for key, value in finding.evidence:
        if key in ("reason", "result", "message", "loss curves", "worst case"):
            continue
        if key == "cases" and isinstance(value, dict):
            # the cases that failed: those that passed are in the reports
            value = {c: said for c, said in value.items() if not str(said).startswith("failed 0")}
        if value in ({}, [], ()):
            continue
        said = str(value) if key in _WHOLE else short(value)
        console.print(f"       {escape(key)}: {escape(said)}", highlight=False)
    if report_path and finding.probe is not None:
        console.print(
            f"       replay: kernelaudit repro {report_path} {finding.id}", highlight=False
        )


def print_evidence(console: Console, finding: Finding) -> None:
    """Every piece of evidence of one finding, in full (used by `kernelaudit repro`)."""
    console.print(
        f"[bold]{finding.id}[/] {escape(f'[{finding.check}]')} {escape(finding.title)}",
        highlight=False,
    )
    if finding.probe is not None:
        console.print(f"  case: {escape(finding.probe.case.describe())}", highlight=False)
    for key, value in finding.evidence:
        console.print(f"  {escape(key)}: {escape(short(value, 2000))}", highlight=False)


def short(value: Any, limit: int = 200) -> str:
    """`value` in at most about `limit` characters: numbers to four significant digits,
    mappings and lists item by item, never cut inside an item (what is left is counted)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        items = [f"{k}: {_item(v)}" for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        items = [_item(v) for v in value]
    else:
        text = str(value)
        return text if len(text) <= limit else text[: limit - 3] + "..."
    shown: list[str] = []
    for item in items:
        if shown and sum(len(i) + 2 for i in shown) + len(item) > limit:
            break
        shown.append(item)
    rest = len(items) - len(shown)
    return "; ".join(shown) + (f"; and {rest} more" if rest else "")


def _item(value: Any) -> str:
    """One item of a mapping or list, whole."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "(" + ", ".join(f"{k} {_item(v)}" for k, v in value.items()) + ")"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_item(v) for v in value) + "]"
    return json.dumps(value) if value is None or isinstance(value, bool) else str(value)
