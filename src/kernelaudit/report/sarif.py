"""The SARIF 2.1.0 report: the findings tied to a line of source, for code-scanning tools
(GitHub code scanning, GitLab, editors' SARIF viewers) that show each next to its line.

One run, its tool driver "kernelaudit"; one rule per check, and for a tripwire one per
tripwire rule ("tripwires/timer-patching"); one result per finding tied to a line: a
tripwire's line (evidence "file" and "line"), the lines of a Triton kernel whose loads or
stores left their tensor under the interpreter (triton-bounds, evidence "source":
["kernels.py:42", ...]), the line compute-sanitizer blamed for an error (sanitizer, evidence
"where": "file:line"). A finding without a source line (a numerics failure, a training
experiment) is left out, not pinned to a line it is not about: the JSON and JUnit reports hold
every finding, and the run's properties count the findings left out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import kernelaudit
from kernelaudit.checks import REGISTRY
from kernelaudit.findings import AuditReport, Finding
from kernelaudit.report.seal import write_atomically
from kernelaudit.tripwires import RULES

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
ROOT_BASE = "%SRCROOT%"
"""The base id of the files named relative to `write_sarif`'s root (the working folder)."""

_LEVELS = {"fail": "error", "warn": "warning", "note": "note"}
_SUMMARIES = {check.name: check.summary for check in REGISTRY}
_LINES_IN = {"triton-bounds": "source", "sanitizer": "where"}
"""The evidence that holds "file:line" texts, by check (a tripwire has "file" and "line")."""


@dataclass(frozen=True)
class SourceLine:
    """A line of a file: `path` as the finding names it (resolved where it names a file by
    its name alone), `line` 1-based."""

    path: Path
    line: int


def write_sarif(reports: Sequence[AuditReport], path: Path, root: Path | None = None) -> None:
    """Write the findings of `reports` tied to a line of source to `path` as one SARIF 2.1.0
    run, atomically. Files inside `root` (the current working folder unless given, as a
    repository's checkout is in CI) are named relative to it; others by their file URI."""
    base = (root or Path.cwd()).resolve()
    rules: list[dict[str, Any]] = []
    index: dict[str, int] = {}  # rule id -> its place in `rules`
    results = []
    unlocated = 0
    for report in reports:
        for finding in report.findings:
            lines = source_lines(report, finding)
            if not lines:
                unlocated += 1
                continue
            rule = _rule(finding)
            if rule["id"] not in index:
                index[rule["id"]] = len(rules)
                rules.append(rule)
            results.append(_result(report, finding, lines, rule["id"], index[rule["id"]], base))
    driver = {"name": "kernelaudit", "version": kernelaudit.__version__, "rules": rules}
    run = {
        "tool": {"driver": driver},
        "originalUriBaseIds": {ROOT_BASE: {"uri": base.as_uri().rstrip("/") + "/"}},
        "results": results,
        "properties": {"findings_without_a_source_line": unlocated},
    }
    document = {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}
    write_atomically(path, json.dumps(document, indent=1) + "\n")


def source_lines(report: AuditReport, finding: Finding) -> tuple[SourceLine, ...]:
    """The lines of source `finding` is tied to, the one it is reported at first; empty for a
    finding that names no line, or only files that cannot be found.

    A file named by its name alone (the interpreter records "kernels.py:42") is looked for in
    the candidate's folder, and in the folder of the file a format reader read it from."""
    evidence = dict(finding.evidence)
    places: list[tuple[object, object]] = []
    if finding.check == "tripwires":
        places.append((evidence.get("file"), evidence.get("line")))
    elif finding.check in _LINES_IN:
        texts = evidence.get(_LINES_IN[finding.check])
        if isinstance(texts, str):
            texts = [texts]
        if isinstance(texts, (list, tuple)):
            places += [_split(text) for text in texts]
    found = []
    for file, line in places:
        if isinstance(file, str) and file and isinstance(line, int) and line > 0:
            path = _located(Path(file), report)
            if path is not None:
                found.append(SourceLine(path, line))
    return tuple(found)


def _split(text: object) -> tuple[str, int | None]:
    """("kernels.py", 42) from "kernels.py:42"; no line where the text ends in none."""
    file, _, line = str(text).rpartition(":")
    return file, int(line) if line.isdigit() else None


def _located(path: Path, report: AuditReport) -> Path | None:
    if path.is_absolute():
        return path
    for source in (report.candidate_source, report.candidate_path):
        if source and (Path(source).parent / path).is_file():
            return Path(source).parent / path
    return None


def _rule(finding: Finding) -> dict[str, Any]:
    """The SARIF rule of a finding: its tripwire rule, else its check."""
    name = dict(finding.evidence).get("rule")
    if finding.check == "tripwires" and isinstance(name, str) and name in RULES:
        rule = RULES[name]
        return {
            "id": f"tripwires/{name}",
            "shortDescription": {"text": f"tripwire {name}: {rule.looks_for}"},
            "fullDescription": {"text": rule.why},
        }
    summary = _SUMMARIES.get(finding.check, finding.check)
    return {"id": finding.check, "shortDescription": {"text": summary}}


def _result(
    report: AuditReport,
    finding: Finding,
    lines: tuple[SourceLine, ...],
    rule_id: str,
    rule_index: int,
    base: Path,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": rule_id,
        "ruleIndex": rule_index,
        "level": _LEVELS[finding.severity],
        "message": {"text": f"{finding.title} ({report.candidate} on {report.problem})"},
        "locations": [_location(lines[0], base)],
        "properties": {
            "problem": report.problem,
            "candidate": report.candidate,
            "finding": finding.id,
            "severity": finding.severity,
            "verdict": report.verdict,
        },
    }
    if len(lines) > 1:
        result["relatedLocations"] = [
            {"id": n, **_location(line, base)} for n, line in enumerate(lines[1:], start=1)
        ]
    return result


def _location(source: SourceLine, base: Path) -> dict[str, Any]:
    path = source.path.resolve()
    if path.is_relative_to(base):
        artifact = {"uri": quote(path.relative_to(base).as_posix()), "uriBaseId": ROOT_BASE}
    else:
        artifact = {"uri": path.as_uri()}
    return {
        "physicalLocation": {"artifactLocation": artifact, "region": {"startLine": source.line}}
    }
