"""What a sanitizer session's runs say, as the sanitizer check's findings: each tool's reports
grouped by kernel and blamed on the candidate (the kernels the reference launches too are
the library's, and said apart), the plain run's and each tool's own failures as notes, and
what the check cost next to the audit."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Sequence
from typing import Any

from kernelaudit.checks.base import Failure, Severity
from kernelaudit.runner.auditor.limits import passed_bound
from kernelaudit.sanitizer.attribution import attribute, kernel_base
from kernelaudit.sanitizer.report import Report
from kernelaudit.sanitizer.session import Session, ToolRun

_SEVERITIES: dict[str, Severity] = {"error": "fail", "warning": "warn", "info": "note"}
"""A report's level (racecheck's; every other tool's reports are errors) as a severity."""

_SHOWN = 6
"""Kernels, reports or messages listed by name in one piece of evidence."""


def judged(session: Session, audit_s: float, dropped: tuple[str, ...] = ()) -> list[Failure]:
    """The failures and notes of one session: the candidate's reports grouped by tool, kind,
    access and kernel; what kept a run from checking; library reports; the cost."""
    failures = _plain_notes(session)
    library: list[Report] = []
    outside: list[Report] = []
    for tool_run in session.tools:
        failures += _tool_notes(tool_run)
        if tool_run.output is None:
            continue
        split = attribute(tool_run.output.reports, session.reference_kernels)
        library += split.library
        outside += split.outside
        failures += _blamed(tool_run, split.candidate, session)
        output = tool_run.output
        if not output.reports and not output.problems and (output.errors or 0) > 0:
            failures.append(_unread(tool_run))
    if library or outside:
        failures.append(_library_note(library, outside))
    failures.append(_cost_note(session, audit_s, dropped))
    return failures


def _blamed(tool_run: ToolRun, reports: Sequence[Report], session: Session) -> list[Failure]:
    groups: dict[tuple[str, ...], list[Report]] = {}
    for report in reports:
        key = (
            report.kind,
            report.severity,
            report.space,
            report.access,
            kernel_base(report.kernel),
        )
        groups.setdefault(key, []).append(report)
    failures = []
    for (kind, severity, space, access, base), group in groups.items():
        first = group[0]
        evidence: list[tuple[str, Any]] = [
            ("tool", tool_run.run.tool),
            ("kernel", first.kernel),
            ("where", first.where),
            ("access", _access(first)),
            ("address", f"{first.address} {first.verdict}".strip()),
            ("thread", f"{first.thread} in block {first.block}" if first.thread else first.block),
            ("reports", len(group)),
        ]
        if tool_run.output is not None and tool_run.output.errors is not None:
            evidence.append(("errors counted by the tool", tool_run.output.errors))
        evidence += [
            ("cases run", list(session.cases)),
            ("first report", "\n".join(first.lines)),
            ("sanitizer command", shlex.join(tool_run.run.command)),
        ]
        failures.append(
            Failure(
                key=f"{tool_run.run.tool}:{kind}:{space}-{access}:{base}",
                title=_title(tool_run.run.tool, group, base),
                evidence=tuple((k, v) for k, v in evidence if v not in ("", None)),
                severity=_SEVERITIES.get(severity, "warn"),
                score=float(len(group)),
            )
        )
    return failures


def _title(tool: str, group: Sequence[Report], base: str) -> str:
    first = group[0]
    count = f"{len(group)} report{'' if len(group) == 1 else 's'}"
    space = f"{first.space} " if first.space else ""
    if first.kind == "invalid access":
        what = "invalid"
        if "out of bounds" in first.verdict:
            what = "out-of-bounds"
        elif "misaligned" in first.verdict:
            what = "misaligned"
        return (
            f"{tool}: {what} {space}{first.access} of {first.size} bytes in kernel {base} ({count})"
        )
    if first.kind == "uninitialized access":
        return (
            f"{tool}: kernel {base} reads uninitialised {space}memory ({first.size}-byte "
            f"{first.access}s, {count})"
        )
    if first.kind == "race":
        hazards = sum(r.hazards or 0 for r in group)
        return (
            f"{tool}: shared-memory race between {first.access.replace('/', ' and ')} accesses "
            f"in kernel {base} ({hazards} hazards, {count})"
        )
    if first.kind == "hazard":
        return (
            f"{tool}: potential {first.access} hazard on shared memory in kernel {base} ({count})"
        )
    return f"{tool}: {first.headline.rstrip('.')} in kernel {base} ({count})"


def _access(report: Report) -> str:
    if report.kind not in ("invalid access", "uninitialized access", "race", "hazard"):
        return ""
    size = f" of {report.size} bytes" if report.size is not None else ""
    return f"{report.space} {report.access}{size}".strip()


def _plain_notes(session: Session) -> list[Failure]:
    """What went wrong running the candidate without the sanitizer."""
    plain, result = session.plain, session.plain_result
    if session.plain_refused:
        return [_refused("plain-run", "its run without the sanitizer", session.plain_refused)]
    if plain.over_disk:
        return [_wrote_past("plain-run", "its run without the sanitizer", plain.over_disk)]
    if result is None:
        _, over = passed_bound(plain.over_memory, plain.over_disk)
        how = (
            f"was stopped: {over}"
            if over
            else f"was stopped after {plain.seconds:.0f} s"
            if plain.timed_out
            else f"exited with code {plain.returncode} and wrote no result"
        )
        return [
            note(
                "plain-run",
                f"the candidate's run without the sanitizer {how}; its kernels could not be listed",
                ("output", plain.output.strip()),
            )
        ]
    if result.error:
        return [note("plain-run", result.error)]
    if result.failures:
        return [
            note(
                "plain-run",
                f"{len(result.failures)} call(s) raised without the sanitizer, so the sanitizer "
                f"saw only the calls before them: {result.failures[0]}",
                ("calls that raised", list(result.failures)),
            )
        ]
    return []


def _tool_notes(tool_run: ToolRun) -> list[Failure]:
    """Why a run checked less than it should have: stopped, failed, cut short."""
    run, output = tool_run.run, tool_run.output
    tool = run.tool
    command = ("sanitizer command", shlex.join(run.command))
    if run.refused:
        return [_refused(tool, f"compute-sanitizer {tool}'s run", run.refused, command)]
    if run.over_disk:
        return [_wrote_past(tool, f"compute-sanitizer {tool}'s run", run.over_disk, command)]
    if run.returncode is None:  # stopped: for memory, or at the budget's limit
        limit = f" at the budget's limit after {run.seconds:.0f} s"
        stopped, over = passed_bound(run.over_memory, run.over_disk)
        why = f": {over}" if over else limit
        return [
            note(
                f"{tool}:{stopped or 'stopped'}",
                f"compute-sanitizer {tool} was stopped{why}; what it reported until then is judged",
                ("output", run.output.strip()),
                command,
            )
        ]
    if output is None:
        return [
            note(
                f"{tool}:no-report",
                f"compute-sanitizer {tool} wrote no report (exit code {run.returncode})",
                ("output", run.output.strip()),
                command,
            )
        ]
    if output.problems:
        return [
            note(
                f"{tool}:tool-error",
                f"compute-sanitizer {tool} could not check the candidate: {output.problems[0]}",
                ("messages", list(output.problems)),
                ("output", run.output.strip()),
                command,
            )
        ]
    if not output.complete:
        return [
            note(
                f"{tool}:cut-short",
                f"compute-sanitizer {tool}'s report ends without its summary line; what it "
                "reported until then is judged",
                ("output", run.output.strip()),
                command,
            )
        ]
    return []


def _unread(tool_run: ToolRun) -> Failure:
    output = tool_run.output
    assert output is not None
    return Failure(
        key=f"{tool_run.run.tool}:unread",
        title=f"compute-sanitizer {tool_run.run.tool} counted {output.errors} error(s) in a form "
        "kernelaudit could not read; see its log",
        evidence=(
            ("log", tool_run.run.log[-4000:]),
            ("sanitizer command", shlex.join(tool_run.run.command)),
        ),
        severity="warn",
    )


def _library_note(library: Sequence[Report], outside: Sequence[Report]) -> Failure:
    kernels = Counter(kernel_base(r.kernel) for r in library)
    parts = []
    if library:
        names = ", ".join(name for name, _ in kernels.most_common(3))
        parts.append(f"{len(library)} inside library kernels ({names})")
    if outside:
        parts.append(f"{len(outside)} outside any kernel")
    first = (library or outside)[0]
    return note(
        "library-kernels",
        f"compute-sanitizer reports not blamed on the candidate: {' and '.join(parts)}",
        ("library kernels", dict(kernels.most_common(_SHOWN))),
        ("outside any kernel", [r.headline for r in outside[:_SHOWN]]),
        ("first report", "\n".join(first.lines)),
    )


def _cost_note(session: Session, audit_s: float, dropped: tuple[str, ...]) -> Failure:
    ran = [t.run.tool for t in session.tools]
    plain = session.plain_s
    if ran:
        per_run = session.sanitized_s / len(ran)
        ratio = f", {per_run / plain:.0f}x" if plain > 0 else ""
        spent = session.wall_s
        share = spent / (audit_s + spent) if audit_s + spent > 0 else 0.0
        title = (
            f"compute-sanitizer ran {', '.join(ran)} on {len(session.cases)} case(s) in "
            f"{spent:.1f} s side by side ({per_run:.1f} s a tool{ratio} the {plain:.1f} s of "
            f"the same run without it), {share:.0%} of the audit"
        )
    else:
        title = "compute-sanitizer ran no tool"
    if session.skipped:
        title += "; skipped " + ", ".join(f"{tool} ({why})" for tool, why in session.skipped)
    kernels = [
        f"{k.name} ({'?' if k.shared_bytes is None else k.shared_bytes} bytes of shared memory)"
        for k in session.candidate_kernels
    ]
    return note(
        "cost",
        title,
        ("seconds per tool", {t.run.tool: round(t.run.seconds, 1) for t in session.tools}),
        ("kernels checked", {t.run.tool: list(t.kernels) for t in session.tools if t.kernels}),
        ("seconds without the sanitizer", round(plain, 1)),
        ("budget seconds", session.budget_s),
        ("audit seconds besides the sanitizer's", round(audit_s, 1)),
        ("skipped", dict(session.skipped)),
        ("cases run", list(session.cases)),
        ("cases left out", list(dropped)),
        ("candidate kernels", kernels[:_SHOWN]),
        (
            "why the kernels could not be listed",
            session.plain_result.listing_error if session.plain_result is not None else "",
        ),
        ("reference kernels", [kernel_base(n) for n in session.reference_kernels[:_SHOWN]]),
    )


def _refused(key: str, run: str, why: str, *evidence: tuple[str, Any]) -> Failure:
    """A file the auditor reads after a run that is not one the run writes: it lies in a
    folder the candidate's processes write, so they put it there (a link to a device that never
    ends, a file of gigabytes), and the candidate fails for it; it was never read."""
    title = f"{run} left a file no honest run writes where the auditor reads its result: {why}"
    return _failed(f"{key}:refused", title, why, evidence)


def _wrote_past(key: str, run: str, why: str, *evidence: tuple[str, Any]) -> Failure:
    """A run whose processes wrote past a folder's bound (`runner.auditor.limits.FolderBound`):
    what a kernel's run writes there (its compiled kernels, its result, the tool's log) takes a
    small part of it, so the candidate fails for it; the runs beside it were stopped."""
    return _failed(f"{key}:disk", f"{run} was stopped: {why}", why, evidence)


def _failed(key: str, title: str, why: str, evidence: tuple[tuple[str, Any], ...]) -> Failure:
    return Failure(key=key, title=title, evidence=(("why", why), *evidence), severity="fail")


def note(key: str, title: str, *evidence: tuple[str, Any]) -> Failure:
    kept = tuple((k, v) for k, v in evidence if v not in ("", None, [], {}))
    return Failure(key=key, title=title, evidence=kept, severity="note")
