"""The JUnit XML report, for CI systems that show test results (GitLab, Jenkins, Buildkite,
the test reporters of GitHub Actions): one test case per candidate.

A test case's classname is the problem and its name the candidate; its time is the audit's
seconds. A FAIL verdict is a <failure> whose text holds every failing finding with its numbers,
its smallest failing case and the command that replays it; warnings, notes and what the audit
could not verify on its machine are the test case's <system-out>. A candidate without a report
(its audit could not run, timed out or crashed, as a corpus stores it) is an <error>.
"""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

from kernelaudit.findings import AuditReport, Finding
from kernelaudit.report.seal import write_atomically
from kernelaudit.report.terminal import short

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
"""Characters XML 1.0 cannot hold, escaped or not."""
_UNSAID = ("reason", "result", "loss curves")
"""Evidence a failure's text leaves out: the title says the first two again, and the third is a
series to plot (the JSON and HTML reports hold it)."""


@dataclass(frozen=True)
class Unaudited:
    """A candidate without a report: its audit could not run (a problem or candidate file that
    cannot be read), timed out or crashed, as a corpus stores it.

    outcome: what happened, in the corpus's words ("error", "timeout", "crash", "unrunnable",
        "tampered"); message: the error in full; seconds: how long the job ran, where known.
    """

    problem: str
    candidate: str
    outcome: str
    message: str
    seconds: float | None = None


def write_junit(
    reports: Sequence[AuditReport],
    path: Path,
    suite: str,
    report_path: Path | Sequence[Path | None] | None = None,
    unaudited: Sequence[Unaudited] = (),
) -> None:
    """Write `reports` (and the `unaudited` candidates) to `path` as one JUnit test suite named
    `suite`, atomically.

    report_path: the JSON report each finding replays from (`kernelaudit repro REPORT F1`):
    one file holding every report (`kernelaudit check --json`), or one path per report in the
    order of `reports` (a corpus writes one file per job); None where there is none.
    """
    paths = _report_paths(reports, report_path)
    cases = [_audited(report, paths[i]) for i, report in enumerate(reports)]
    cases += [_not_audited(candidate) for candidate in unaudited]
    seconds = sum(r.seconds for r in reports) + sum(u.seconds or 0.0 for u in unaudited)
    counts = {
        "tests": str(len(cases)),
        "failures": str(sum(r.verdict != "PASS" for r in reports)),
        "errors": str(len(unaudited)),
        "skipped": "0",
        "time": _seconds(seconds),
    }
    root = ET.Element("testsuites", {"name": _text(suite), **counts})
    ET.SubElement(root, "testsuite", {"name": _text(suite), **counts}).extend(cases)
    ET.indent(root)
    # every character outside ASCII as a reference: the file reads the same in any locale
    text = ET.tostring(root, encoding="us-ascii", xml_declaration=True).decode("ascii")
    write_atomically(path, text + "\n")


def _report_paths(
    reports: Sequence[AuditReport], report_path: Path | Sequence[Path | None] | None
) -> list[Path | None]:
    if report_path is None or isinstance(report_path, (str, PathLike)):
        return [report_path] * len(reports)
    paths = list(report_path)
    if len(paths) != len(reports):
        raise ValueError(
            f"{len(paths)} report paths for {len(reports)} reports: give one path per report, "
            "or one path for a file that holds them all"
        )
    return paths


def _audited(report: AuditReport, report_path: Path | None) -> ET.Element:
    case = ET.Element(
        "testcase",
        {
            "classname": _text(report.problem),
            "name": _text(report.candidate),
            "time": _seconds(report.seconds),
        },
    )
    if report.verdict != "PASS":
        failing = report.failures
        failure = ET.SubElement(
            case,
            "failure",
            {
                "message": _text(_headline(failing, report.verdict)),
                "type": ",".join(sorted({f.check for f in failing})) or report.verdict,
            },
        )
        failure.text = _text("\n\n".join(_described(f, report_path) for f in failing))
    said = _caveats(report)
    if said:
        ET.SubElement(case, "system-out").text = _text("\n".join(said))
    return case


def _headline(failing: Sequence[Finding], verdict: str) -> str:
    """The failure's one-line message: the first failing finding, and how many more follow."""
    if not failing:
        return verdict
    first = failing[0]
    more = len(failing) - 1
    after = f" (and {more} more failing finding{'' if more == 1 else 's'})" if more else ""
    return f"{first.id} [{first.check}] {first.title}{after}"


def _described(finding: Finding, report_path: Path | None) -> str:
    """One failing finding as the terminal shows it: its numbers, where it was seen, its
    smallest failing case and the command that replays it."""
    lines = [f"{finding.id} [{finding.check}] {finding.title}"]
    if finding.probe is not None:
        lines.append(f"  {finding.seen()}; smallest failing case: {finding.probe.case.describe()}")
    lines += [f"  {key}: {short(value)}" for key, value in finding.evidence if key not in _UNSAID]
    if report_path is not None and finding.probe is not None:
        replay = shlex.join(["kernelaudit", "repro", str(report_path), finding.id])
        lines.append(f"  replay: {replay}")
    return "\n".join(lines)


def _caveats(report: AuditReport) -> list[str]:
    """What a reader of the verdict should know beside it: warnings and notes, the checks that
    could not run here, a candidate that ran without its sandbox, assumptions and how the
    problem's format was read."""
    lines = [
        f"{f.severity} {f.id} [{f.check}] {f.title} ({f.occurrences} case(s))"
        for f in report.findings
        if f.severity != "fail"
    ]
    lines += [f"not verified on {report.device}: {name} ({why})" for name, why in report.unverified]
    if report.isolation and not report.confined:
        lines.append(f"isolation: {report.isolation}")
    lines += [f"assumed: {name} {what}" for name, what in report.assumed]
    lines += [f"format: {line}" for line in report.interpretation]
    return lines


def _not_audited(candidate: Unaudited) -> ET.Element:
    case = ET.Element(
        "testcase",
        {
            "classname": _text(candidate.problem),
            "name": _text(candidate.candidate),
            "time": _seconds(candidate.seconds or 0.0),
        },
    )
    first_line = candidate.message.strip().split("\n", 1)[0]
    error = ET.SubElement(
        case, "error", {"message": _text(first_line), "type": _text(candidate.outcome)}
    )
    error.text = _text(candidate.message)
    return case


def _seconds(seconds: float) -> str:
    return f"{seconds:.3f}"


def _text(value: str) -> str:
    """`value` with the characters XML cannot hold (a terminal's colour codes in an exception
    message, a NUL) spelled as escapes: one of them would make a parser refuse the file."""
    return _NOT_XML.sub(lambda match: f"\\x{ord(match.group()):02x}", value)
