"""SOL-ExecBench traces: one JSON line per (workload, solution) with the benchmark's status,
correctness and performance fields, so its tools and leaderboards read kernelaudit's results.

A status says what happened at that workload, as the benchmark would judge it, except that
kernelaudit's evidence of gaming (replayed outputs, patched timers, work left running) marks
every workload REWARD_HACK. Everything else kernelaudit found, at any case, is listed in
`correctness.extra.kernelaudit` with the audit's verdict: a trace that says PASSED can still
come from a candidate kernelaudit fails at shapes the benchmark never runs."""

from __future__ import annotations

import json
import platform
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kernelaudit.findings import AuditReport, Finding, _json_default, _strict
from kernelaudit.formats.solexecbench.reader import WORKLOADS, read_workloads
from kernelaudit.problem.spec import Problem
from kernelaudit.report.seal import write_atomically

GAMING_CHECKS = frozenset(
    {
        "replay",
        "timing",
        "global-state",
        "deferred-work",
        "stale-memory",
        "output-objects",
        "kernels",
    }
)
"""Checks whose failures mean the candidate games the measurement rather than computes."""


def status_at(report: AuditReport, workload: str) -> tuple[str, str]:
    """The benchmark's status for one workload, and the log line that explains it."""
    failures = report.failures
    gaming = [f for f in failures if f.check in GAMING_CHECKS]
    if gaming:
        return "REWARD_HACK", _line(gaming[0])
    for finding in failures:
        if finding.check == "execution" and _import_failed(finding):
            return "COMPILE_ERROR", _line(finding)
    here = [f for f in failures if _at(f, workload)]
    for finding in here:
        if finding.check == "execution":
            kind = dict(finding.evidence).get("kind", "")
            return ("TIMEOUT" if kind == "timeout" else "RUNTIME_ERROR"), _line(finding)
    for finding in here:
        key = finding.key.lower()
        if "shape" in key:
            return "INCORRECT_SHAPE", _line(finding)
        if "dtype" in key:
            return "INCORRECT_DTYPE", _line(finding)
        return "INCORRECT_NUMERICAL", _line(finding)
    return "PASSED", ""


def _import_failed(finding: Finding) -> bool:
    """The candidate never ran: importing (and so building) it failed."""
    return "importing " in finding.title and " raised" in finding.title


def _at(finding: Finding, workload: str) -> bool:
    cases = [c for c in (finding.original, finding.probe.case if finding.probe else None) if c]
    return any(c.label == workload and not c.values and not c.layouts for c in cases)


def _line(finding: Finding) -> str:
    return f"kernelaudit {finding.id} [{finding.check}] {finding.title}"


def trace_lines(problem: Problem, report: AuditReport) -> list[dict[str, Any]]:
    """The trace lines of one audited solution: one per workload of the problem."""
    folder = Path(problem.source).parent
    workloads = read_workloads(folder / WORKLOADS)
    errors = dict(report.workload_errors)
    environment = dict(report.environment)
    latency = _latency(report)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    extra = {
        "verdict": report.verdict,
        "profile": report.profile,
        "findings": [
            {"id": f.id, "check": f.check, "severity": f.severity, "title": f.title}
            for f in report.findings
        ],
        "interpretation": list(report.interpretation),
    }
    lines = []
    for raw in workloads:
        workload = {k: v for k, v in raw.items() if k != "_line"}
        name = str(raw.get("uuid") or f"line {raw['_line']}")
        status, log = status_at(report, name)
        measured = errors.get(name, {})
        evaluation: dict[str, Any] = {
            "status": status,
            "environment": {
                "hardware": environment.get("gpu") or environment.get("cpu") or report.device,
                "libs": {k: v for k, v in environment.items() if k in ("torch", "triton", "cuda")},
                "host": platform.node(),
            },
            "timestamp": stamp,
            "log": log,
            "correctness": {
                "max_relative_error": measured.get("max_relative_error"),
                "max_absolute_error": measured.get("max_absolute_error"),
                "has_nan": measured.get("has_nan"),
                "has_inf": measured.get("has_inf"),
                "extra": {"kernelaudit": extra},
            },
            "performance": latency.get(name),
        }
        lines.append(
            {
                "definition": problem.name,
                "workload": workload,
                "solution": report.candidate,
                "evaluation": evaluation,
            }
        )
    return lines


def _latency(report: AuditReport) -> dict[str, dict[str, float]]:
    """Times the audit measured, by workload: the timing check's note carries them."""
    found: dict[str, dict[str, float]] = {}
    for finding in report.findings:
        if finding.check != "timing" or finding.probe is None:
            continue
        evidence = dict(finding.evidence)
        candidate, reference = evidence.get("candidate"), evidence.get("reference")
        if not isinstance(candidate, dict) or "median_s" not in candidate:
            continue
        times = {"latency_ms": candidate["median_s"] * 1e3}
        if isinstance(reference, dict) and "median_s" in reference:
            times["reference_latency_ms"] = reference["median_s"] * 1e3
            times["speedup_factor"] = reference["median_s"] / max(candidate["median_s"], 1e-12)
        found.setdefault(finding.probe.case.label, times)
    return found


def write_traces(audited: Sequence[tuple[Problem, AuditReport]], path: Path) -> None:
    """Write the traces of every audited SOL-ExecBench solution to a JSONL file; solutions of
    problems in other formats have no workloads file and are skipped."""
    lines = [
        json.dumps(_strict(line), default=_json_default, allow_nan=False) + "\n"
        for problem, report in audited
        if problem.source.endswith("definition.json")
        for line in trace_lines(problem, report)
    ]
    write_atomically(path, "".join(lines))
