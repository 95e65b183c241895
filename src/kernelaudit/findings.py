"""What an audit concludes: findings with evidence and a reproducer, and the report that holds
them. Everything here round-trips through JSON so `kernelaudit repro` can replay a finding."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kernelaudit.checks.base import Probe, RunPlan, Severity
from kernelaudit.errors import UsageError
from kernelaudit.inputs.case import Case
from kernelaudit.report.seal import check, seal, write_atomically

REPORT_FORMAT = "kernelaudit-report/1"


@dataclass(frozen=True)
class Finding:
    """One way the candidate failed (or a warning or note), shrunk to its simplest case.

    probe: the shrunk probe; rerunning it reproduces the finding. None for a finding made
        without running anything (a tripwire in the candidate's source).
    original: the case the failure was first seen in, before shrinking (None likewise).
    occurrences: how many probes failed this way; probes: how many the check judged.
    """

    id: str
    check: str
    key: str
    severity: Severity
    title: str
    evidence: tuple[tuple[str, Any], ...]
    probe: Probe | None
    original: Case | None
    occurrences: int
    probes: int
    shrink_steps: tuple[str, ...] = ()

    @property
    def worst_case(self) -> dict[str, Any] | None:
        """The case the finding was shrunk from, where shrinking moved away from it: its
        variant, title and leading evidence (`engine.grouping`); None otherwise."""
        worst = dict(self.evidence).get("worst case")
        return worst if isinstance(worst, dict) else None

    @property
    def headline(self) -> str:
        """What a reader sees first: the worst case's title, else the finding's own."""
        worst = self.worst_case
        return str(worst["title"]) if worst is not None else self.title

    def seen(self, verb: str = "seen in") -> str:
        """How often the finding was seen, in counts that add up: "seen in 2 of 36 numerics
        case(s)", or where one case failed in several observations (outputs, calls), "seen 47
        times in 5 numerics case(s)". A finding made without running anything has none."""
        check = self.probe.check if self.probe is not None else self.check
        if self.occurrences <= self.probes:
            return f"{verb} {self.occurrences} of {self.probes} {check} case(s)"
        return f"seen {self.occurrences} times in {self.probes} {check} case(s)"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "check": self.check,
            "key": self.key,
            "severity": self.severity,
            "title": self.title,
            "evidence": {k: v for k, v in self.evidence},
            "probe": None
            if self.probe is None
            else {
                "check": self.probe.check,
                "case": self.probe.case.to_json(),
                "plan": self.probe.plan.to_json(),
            },
            "original_case": None if self.original is None else self.original.to_json(),
            "occurrences": self.occurrences,
            "probes": self.probes,
            "shrink_steps": list(self.shrink_steps),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        probe = data["probe"]
        original = data.get("original_case")
        return cls(
            id=data["id"],
            check=data["check"],
            key=data["key"],
            severity=data["severity"],
            title=data["title"],
            evidence=tuple(data.get("evidence", {}).items()),
            probe=None
            if probe is None
            else Probe(
                probe["check"], Case.from_json(probe["case"]), RunPlan.from_json(probe["plan"])
            ),
            original=None if original is None else Case.from_json(original),
            occurrences=int(data["occurrences"]),
            probes=int(data["probes"]),
            shrink_steps=tuple(data.get("shrink_steps", ())),
        )


@dataclass(frozen=True)
class CaseRecord:
    """One probe that ran, and the failure keys it produced (empty: it passed)."""

    check: str
    case: Case
    failures: tuple[str, ...]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "case": self.case.to_json(),
            "failures": list(self.failures),
            "seconds": round(self.seconds, 6),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaseRecord:
        return cls(
            data["check"],
            Case.from_json(data["case"]),
            tuple(data["failures"]),
            float(data["seconds"]),
        )


@dataclass(frozen=True)
class AuditReport:
    """The verdict for one candidate on one problem."""

    problem: str
    problem_path: str
    candidate: str
    candidate_path: str
    candidate_function: str
    profile: str
    device: str
    verdict: str
    """"PASS" or "FAIL"."""
    findings: tuple[Finding, ...]
    records: tuple[CaseRecord, ...]
    seconds: float
    environment: tuple[tuple[str, str], ...] = ()
    phases: tuple[tuple[str, float], ...] = ()
    """Where the time went: planning; worker start, truth and baseline, candidate runs and
    judging while probing; then shrinking (its reruns included)."""
    candidate_source: str = ""
    """The file the candidate was read from when a format reader generated its module (a
    solution.json, a ModelNew file): what `kernelaudit repro` reads it from again."""
    workload_errors: tuple[tuple[str, dict[str, Any]], ...] = ()
    """For each workload: the plain error figures a benchmark prints (max absolute and
    relative error against the truth, NaN/Inf presence) at its default-valued case."""
    interpretation: tuple[str, ...] = ()
    """How the problem's format was read where it states less than kernelaudit needs (input
    roles inferred, axes held fixed): the problem's notes."""
    check_seconds: tuple[tuple[str, float], ...] = ()
    """Seconds per check: its probes (run and judged) and its concluding experiment."""
    judging_seconds: tuple[tuple[str, float], ...] = ()
    """Seconds each check spent judging, over every observation: where `judging` went."""
    planning_seconds: tuple[tuple[str, float], ...] = ()
    """Seconds each check's plan took, and "batch axes" for inferring them from the reference
    (whichever check asked first): where `planning` went."""
    budget: tuple[tuple[str, float], ...] = ()
    """The time budget and the plan fitted to it: budget_s, planned_s (the estimated seconds of
    the probing phases: the probes that ran, and on a GPU what an audit's probing costs
    besides), probes_planned, probes_untried, probes_required_untried (of those untried, probes
    every audit runs, left out past `engine.budget.REQUIRED_MOST` budgets), probes_sharing_a_run
    (judged on another probe's run of the same calls on the same case)."""
    untried: tuple[tuple[str, int], ...] = ()
    """Probes the budget left out (optional ones, and any of those every audit runs cut past
    `engine.budget.REQUIRED_MOST` budgets), counted by check and shape."""
    isolation: str = ""
    """How the candidate's processes were confined: "bubblewrap: ..." or "none (why)"."""
    unverified: tuple[tuple[str, str], ...] = ()
    """(check, why) for each chosen check that could not do here what the profile asks of it
    (a race or a leak shows only on a GPU): what this verdict does not cover."""
    coverage: tuple[tuple[str, str], ...] = ()
    """(check, what it did) for every chosen check: "ran", "ran in part: why", "could not run
    here: why" or "not applicable: why" (`checks.coverage.coverage`)."""
    assumed: tuple[tuple[str, str], ...] = ()
    """(input, guarantees) the problem or the command line stated for its callers
    (`problem.domain`): values and layouts outside them were not tried."""
    unconfirmed: tuple[str, ...] = ()
    """Checks that found something in this candidate they cannot confirm or rule out on this
    device, and failed nothing (atomics the static scan saw, on a CPU): unlike a check this
    machine cannot run at all, a risk of this candidate's own, which its verdict states
    (`unconfirmed_of`)."""
    files_sha256: tuple[tuple[str, str], ...] = ()
    """("problem", sha256), ("candidate", sha256): the files `kernelaudit check` read before
    any candidate ran (`corpus.jobs.as_read`), which `kernelaudit repro` compares with the
    files it replays. Empty for audits run through the Python API or `demo`."""

    @property
    def confined(self) -> bool:
        return self.isolation.startswith("bubblewrap")

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "fail")

    def finding(self, finding_id: str) -> Finding:
        for finding in self.findings:
            if finding.id == finding_id:
                return finding
        known = ", ".join(f.id for f in self.findings) or "none"
        raise UsageError(f"the report has no finding {finding_id!r}; its findings: {known}")

    def to_json(self) -> dict[str, Any]:
        return {
            "format": REPORT_FORMAT,
            "problem": self.problem,
            "problem_path": self.problem_path,
            "candidate": self.candidate,
            "candidate_path": self.candidate_path,
            "candidate_function": self.candidate_function,
            "candidate_source": self.candidate_source,
            "profile": self.profile,
            "device": self.device,
            "verdict": self.verdict,
            "seconds": round(self.seconds, 3),
            "environment": dict(self.environment),
            "phases": dict(self.phases),
            "interpretation": list(self.interpretation),
            "workload_errors": dict(self.workload_errors),
            "check_seconds": dict(self.check_seconds),
            "judging_seconds": dict(self.judging_seconds),
            "planning_seconds": dict(self.planning_seconds),
            "budget": dict(self.budget),
            "untried": dict(self.untried),
            "isolation": self.isolation,
            "unverified": dict(self.unverified),
            "unconfirmed": list(self.unconfirmed),
            "coverage": dict(self.coverage),
            "assumed": dict(self.assumed),
            "files_sha256": dict(self.files_sha256),
            "findings": [f.to_json() for f in self.findings],
            "cases": [r.to_json() for r in self.records],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AuditReport:
        findings = tuple(Finding.from_json(f) for f in data["findings"])
        return cls(
            problem=data["problem"],
            problem_path=data["problem_path"],
            candidate=data["candidate"],
            candidate_path=data["candidate_path"],
            candidate_function=data["candidate_function"],
            profile=data["profile"],
            device=data["device"],
            verdict=data["verdict"],
            findings=findings,
            records=tuple(CaseRecord.from_json(r) for r in data["cases"]),
            seconds=float(data["seconds"]),
            environment=tuple(data.get("environment", {}).items()),
            phases=tuple(data.get("phases", {}).items()),
            interpretation=tuple(data.get("interpretation", [])),
            candidate_source=str(data.get("candidate_source", "")),
            workload_errors=tuple(data.get("workload_errors", {}).items()),
            check_seconds=tuple(data.get("check_seconds", {}).items()),
            judging_seconds=tuple(data.get("judging_seconds", {}).items()),
            planning_seconds=tuple(data.get("planning_seconds", {}).items()),
            budget=tuple(data.get("budget", {}).items()),
            untried=tuple(data.get("untried", {}).items()),
            isolation=str(data.get("isolation", "")),
            unverified=tuple(data.get("unverified", {}).items()),
            coverage=tuple(data.get("coverage", {}).items()),
            assumed=tuple(data.get("assumed", {}).items()),
            files_sha256=tuple(data.get("files_sha256", {}).items()),
            # a report written before the field: its unverified checks under the same rule
            unconfirmed=tuple(data["unconfirmed"])
            if "unconfirmed" in data
            else unconfirmed_of(data.get("unverified", {}), findings),
        )


ECHOES: dict[str, tuple[tuple[str, ...], str]] = {
    "timed-output:": (("",), "its timed repetitions' results are wrong the same way"),
    "clock-output:": (("",), "the calls timed on the auditor's clock are wrong the same way"),
    "alone-": (("",), "its rows computed alone are wrong the same way"),
    "unwatched-state:": (("import:", "call:"), "a plain process shows the same change"),
}
"""Key prefixes of findings that judge the results (or the state) again in a check's own
setting, the prefixes their cause's key may have in place of their own, and what such a
finding says of its cause: the timing check's results of its last timed repetition
(`timed-output:KEY`) and of the call its auditor's clock timed (`clock-output:KEY`), the
batch-invariance check's row computed alone (`alone-KEY`), the unwatched run's precision flags
read again in a plain process (`unwatched-state:NAME`, the global-state check's `import:NAME`
or `call:NAME`)."""


def cause_of(key: str, check: str, failing: Mapping[str, str]) -> tuple[str, str] | None:
    """The key of the failing finding that `check`'s finding `key` echoes (`ECHOES`), and what
    the echo says of it; None where it echoes none. `failing`: the check of the first failing
    finding with each key. An echo is told by its key alone: another check's failing finding
    with its cause's key, the same results wrong the same way (a symptom, not a second bug)."""
    for prefix, (instead, said) in ECHOES.items():
        if key.startswith(prefix):
            rest = key.removeprefix(prefix)
            cause = next((k + rest for k in instead if k + rest in failing), None)
            if cause is None or failing[cause] == check:
                return None
            return cause, said
    return None


def unconfirmed_of(unverified: Iterable[str], findings: Iterable[Finding]) -> tuple[str, ...]:
    """Of the checks `unverified` (those this device leaves something unverified in), the ones
    that found something in the candidate and failed nothing: a risk of its own that its
    verdict states ("PASS (unconfirmed on cpu: tripwires)"). A check whose finding failed saw
    it confirmed."""
    found: set[str] = set()
    failed: set[str] = set()
    for finding in findings:
        found.add(finding.check)
        if finding.severity == "fail":
            failed.add(finding.check)
    return tuple(name for name in unverified if name in found - failed)


def report_document(report: AuditReport) -> dict[str, Any]:
    """The report as plain, strict JSON values (non-finite numbers and tensors spelled the way
    `write_reports` spells them), ready to cross a pipe or Ray's object store."""
    text = json.dumps(_strict(report.to_json()), default=_json_default, allow_nan=False)
    document: dict[str, Any] = json.loads(text)
    return document


def with_files_changed(report: AuditReport, changes: list[str]) -> AuditReport:
    """`report` when the files it audited changed while they were audited (`changes`: a
    sentence for each): a failing `execution` finding says which, and the verdict is FAIL,
    whatever the probes showed. No verdict stands on bytes other than the ones the command was
    given: a candidate that rewrites its own file could show the scan and a reviewer a file it
    is not."""
    if not changes:
        return report
    finding = Finding(
        id="T1",
        check="execution",
        key="files-changed",
        severity="fail",
        title="no verdict stands on files that changed while they were audited: "
        + "; ".join(changes),
        evidence=(),
        probe=None,
        original=None,
        occurrences=1,
        probes=0,
    )
    return replace(report, verdict="FAIL", findings=(finding, *report.findings))


def write_reports(reports: list[AuditReport], path: Path) -> None:
    """Write one JSON file holding every candidate's report, sealed (`report.seal`) and
    written atomically."""
    content = json.loads(
        json.dumps(_strict([r.to_json() for r in reports]), default=_json_default, allow_nan=False)
    )
    document = {"format": REPORT_FORMAT, "reports": content, "seal": seal(content)}
    write_atomically(path, json.dumps(document, indent=1, allow_nan=False))


def read_reports(path: Path) -> list[AuditReport]:
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(
            f"report {str(path)!r} does not exist; pass the JSON file written by "
            "`kernelaudit check --json`"
        ) from None
    except json.JSONDecodeError as error:
        raise UsageError(
            f"report {str(path)!r} is not JSON ({error}); pass the file written by "
            "`kernelaudit check --json`"
        ) from None
    if not isinstance(document, dict) or document.get("format") != REPORT_FORMAT:
        raise UsageError(
            f"{str(path)!r} is not a kernelaudit report (field 'format' is not "
            f"{REPORT_FORMAT!r}); pass a file written by `kernelaudit check --json`"
        )
    if check(document.get("reports"), document.get("seal")) == "changed":
        raise UsageError(
            f"report {str(path)!r} was changed after kernelaudit wrote it: its seal does not "
            "match its content; audit the candidates again for a report to trust"
        )
    return [AuditReport.from_json(r) for r in document["reports"]]


def _strict(value: Any) -> Any:
    """The document with non-finite floats spelled as strings ("nan", "inf", "-inf"): strict
    JSON has no NaN, and jq and browsers reject files that use it."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    if hasattr(value, "item") and getattr(value, "numel", lambda: 0)() == 1:
        return _strict(value.item())
    return value


def _json_default(value: object) -> object:
    if hasattr(value, "item"):
        return value.item()  # type: ignore[no-any-return]
    if isinstance(value, (tuple, set)):
        return list(value)
    return str(value)
