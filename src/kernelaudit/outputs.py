"""The files a command writes: the options that name them, each option's path checked before
any work starts (a report lost at the end of a long audit to a typo is the worst way to learn
of it), and the reports written where the options say at the end."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from kernelaudit.engine import beside
from kernelaudit.errors import UsageError
from kernelaudit.findings import AuditReport, write_reports
from kernelaudit.report import plots
from kernelaudit.report.html import write_html
from kernelaudit.report.junit import write_junit
from kernelaudit.report.sarif import write_sarif

OUTPUT_OPTIONS = ("json", "html", "trace", "junit", "sarif")
"""The options that name a file a command writes."""

DEFAULT_REPORT = "kernelaudit-report.json"


def add_ci_options(parser: argparse.ArgumentParser) -> None:
    """`--junit` and `--sarif`, for `check`, `demo` and `corpus`."""
    parser.add_argument(
        "--junit",
        type=Path,
        metavar="FILE",
        help="also write a JUnit XML report, for CI test reporters: one test case per "
        "candidate, a failure holding its findings and the commands that replay them (in a "
        "corpus, a job that could not be audited is an error)",
    )
    parser.add_argument(
        "--sarif",
        type=Path,
        metavar="FILE",
        help="also write the findings tied to a source line (tripwires, interpreter bounds, "
        "sanitizer reports) as SARIF 2.1.0, for code scanning",
    )


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """The options of `check` and `demo` that name the reports they write."""
    parser.add_argument(
        "--json",
        type=Path,
        default=Path(DEFAULT_REPORT),
        help=f"where to write the JSON report (default: {DEFAULT_REPORT})",
    )
    add_ci_options(parser)
    parser.add_argument(
        "--html",
        type=Path,
        help="where to write the HTML report: one self-contained page, verdict and coverage "
        "first, every finding with its evidence and plots (default: the JSON report's path "
        "with .html)",
    )


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output option whose file could not be written."""
    for option in OUTPUT_OPTIONS:
        writable(getattr(args, option, None), option)


def writable(path: Path | None, option: str) -> None:
    """Refuse, before any work, an output file that could not be written at the end."""
    if path is None:
        return
    flag = f"--{option}"
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; name a file in it, e.g. {path / 'x'}")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(
            f"{flag} {path}: cannot be written ({folder} is not a folder this user may write "
            "in); name a file in a writable folder"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {path}: the file exists and this user may not write it")


def write_outputs(
    reports: list[AuditReport],
    args: argparse.Namespace,
    suite: str,
    sections: Sequence[str | None] = (),
) -> None:
    """Write the reports where the command line says: JSON and HTML always, JUnit XML and
    SARIF where asked for (`suite`: what the JUnit test suite is called; `sections`: the
    reports' HTML sections already drawn, `report.html.write_html`)."""
    write_reports(reports, args.json)
    write_html(reports, html_path(args), sections)
    if getattr(args, "junit", None):
        write_junit(reports, args.junit, suite, report_path=args.json)
    if getattr(args, "sarif", None):
        write_sarif(reports, args.sarif)


def load_figures_ahead(device: str) -> None:
    """On a GPU, import the HTML report's drawing library in a thread while the audit runs:
    the auditor mostly waits there for the worker and the device, and the report is otherwise
    drawn only after the last audit, with the import in front of it. Every measurement waits
    for it to end (`engine.beside`), and so does the first figure (`plots.load`). Not on a
    CPU, whose cores the candidate's calls use: there the import took as long from the audit
    as it gave back (docs/benchmarks.md)."""
    if device.startswith("cuda"):
        beside.start(plots.load, "figures-ahead")


def html_path(args: argparse.Namespace) -> Path:
    return args.html or args.json.with_suffix(".html")


def written(args: argparse.Namespace) -> str:
    """Which files the command wrote, one line each."""
    lines = [f"JSON report: {args.json}", f"HTML report: {html_path(args)}"]
    if getattr(args, "junit", None):
        lines.append(f"JUnit XML: {args.junit}")
    if getattr(args, "sarif", None):
        lines.append(f"SARIF: {args.sarif}")
    return "\n".join(lines)
