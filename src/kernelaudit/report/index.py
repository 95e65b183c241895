"""The index page of a corpus run: every job in one table, linked to its own HTML report, in
three orders (by verdict, by failing check, by problem) chosen by links on the page. The
orders are switched by CSS alone: no script runs, and a browser without styles shows all
three, one after the other."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from kernelaudit.findings import AuditReport
from kernelaudit.report.page import (
    counts_html,
    document,
    escape,
    severity_counts,
    table,
    verdict_class,
)
from kernelaudit.report.seal import write_atomically

_VERDICT_ORDER = {"FAIL": 0, "PASS": 2}
"""FAIL first, PASS last, and between them the jobs that ended without a verdict."""
_HEADLINE = 160

_STYLE = """
.ordering { display: none; } .ordering.default, .ordering:target { display: block; }
.ordering:target ~ .ordering.default { display: none; }
nav a { margin-right: 1em; }
"""


@dataclass(frozen=True)
class IndexEntry:
    """One job of a corpus run as the index lists it.

    verdict: "PASS", "FAIL", or the status of a job that was not audited ("error",
        "timeout", "crash", "unrunnable", "tampered").
    page: the job's HTML report; None for a job that was not audited.
    failing_checks: the checks with a finding of severity "fail".
    findings: how many findings of each severity: (fail, warn, note).
    headline: the first failing finding's title, or why the job was not audited.
    """

    problem: str
    candidate: str
    verdict: str
    page: Path | None
    failing_checks: tuple[str, ...] = ()
    findings: tuple[int, int, int] = (0, 0, 0)
    headline: str = ""
    seconds: float | None = None


def entry_of(report: AuditReport, page: Path) -> IndexEntry:
    """The index's entry for an audited job whose HTML report is at `page`."""
    return IndexEntry(
        problem=report.problem,
        candidate=report.candidate,
        verdict=report.verdict,
        page=page,
        failing_checks=tuple(sorted({f.check for f in report.failures})),
        findings=severity_counts(report.findings),
        headline=report.failures[0].title if report.failures else "",
        seconds=report.seconds,
    )


def write_index(entries: list[IndexEntry], path: Path) -> None:
    """Write the index of `entries` to `path`, each entry linked to its page by a path
    relative to `path`'s folder (the index moves with the reports beside it)."""
    counts = {
        v: sum(e.verdict == v for e in entries)
        for v in sorted({e.verdict for e in entries}, key=_rank)
    }
    said = ", ".join(
        f"<span class='{verdict_class(v)}'>{n} {escape(v)}</span>" for v, n in counts.items()
    )
    orders: list[tuple[str, str, Callable[[IndexEntry], tuple[object, ...]]]] = [
        ("by-finding", "by failing check", _by_finding),
        ("by-problem", "by problem", _by_problem),
        ("by-verdict", "by verdict", _by_verdict),
    ]
    nav = " ".join(f"<a href='#{anchor}'>{escape(title)}</a>" for anchor, title, _ in orders)
    sections = "".join(
        f"<section id='{anchor}' class='ordering{' default' if anchor == 'by-verdict' else ''}'>"
        f"<h2>{escape(title)}</h2>"
        f"{_table(sorted(entries, key=key), path.parent)}</section>"
        for anchor, title, key in orders
    )
    body = (
        f"<h1>kernelaudit corpus: {len(entries)} candidate(s)</h1><p>{said or 'no jobs'}</p>"
        f"<nav>Order: {nav}</nav>{sections}"
    )
    write_atomically(path, document("kernelaudit corpus", body, style=_STYLE))


def _table(entries: list[IndexEntry], folder: Path) -> str:
    rows = [
        [
            f"<span class='{verdict_class(e.verdict)}'>{escape(e.verdict)}</span>",
            escape(e.problem),
            _link(e, folder),
            escape(", ".join(e.failing_checks) or "-"),
            counts_html(e.findings),
            escape(_short(e.headline)),
            "-" if e.seconds is None else f"{e.seconds:.1f}",
        ]
        for e in entries
    ]
    head = ["verdict", "problem", "candidate", "failing checks", "findings", "first", "seconds"]
    return table(head, rows, fold=False)


def _link(entry: IndexEntry, folder: Path) -> str:
    if entry.page is None:
        return escape(entry.candidate)
    href = quote(Path(os.path.relpath(entry.page, folder)).as_posix())
    return f"<a href='{escape(href)}'>{escape(entry.candidate)}</a>"


def _short(text: str) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= _HEADLINE else line[: _HEADLINE - 1] + "…"


def _rank(verdict: str) -> int:
    return _VERDICT_ORDER.get(verdict, 1)


def _by_verdict(e: IndexEntry) -> tuple[object, ...]:
    return (_rank(e.verdict), e.problem, e.candidate)


def _by_finding(e: IndexEntry) -> tuple[object, ...]:
    return (not e.failing_checks, e.failing_checks, _rank(e.verdict), e.problem, e.candidate)


def _by_problem(e: IndexEntry) -> tuple[object, ...]:
    return (e.problem, _rank(e.verdict), e.candidate)
