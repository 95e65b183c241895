"""`kernelaudit repro REPORT FINDING`: replay one finding of a JSON report, on the files as they
are now, and say whether they are still the ones the report judged."""

from __future__ import annotations

import argparse
from dataclasses import replace

from rich.console import Console
from rich.markup import escape

from kernelaudit.checks import build_checks
from kernelaudit.corpus.jobs import Job, changed_files
from kernelaudit.engine.audit import limits_for, resolve_device
from kernelaudit.engine.executor import Executor
from kernelaudit.errors import UsageError
from kernelaudit.findings import AuditReport, read_reports
from kernelaudit.formats import read_candidate, read_problem
from kernelaudit.guarding.records import is_record
from kernelaudit.guarding.replay import replay_record
from kernelaudit.inputs import scheme
from kernelaudit.problem.backward import autograd_signature, backward_problem
from kernelaudit.problem.domain import assuming
from kernelaudit.profiles import profile_named
from kernelaudit.report.html import write_html
from kernelaudit.report.terminal import print_evidence
from kernelaudit.runner.auditor.process import Worker
from kernelaudit.runner.candidate import CandidateRef


def replay(args: argparse.Namespace, console: Console) -> int:
    """Rerun the finding `args.finding` of every report in `args.report` that has it; exit 1
    when a failing finding is reproduced (or cannot be replayed case by case). A record a
    guard wrote (`kernelaudit.guarding`) is replayed as the call it holds."""
    if is_record(args.report):
        return replay_record(args.report, resolve_device(args.device), console)
    if args.finding is None:
        raise UsageError(
            f"name the finding of {args.report} to replay (its id, e.g. F1), or give a record "
            "a guard wrote"
        )
    matches = []
    for report in read_reports(args.report):
        if any(f.id == args.finding for f in report.findings):
            matches.append(report)
    if not matches:
        known = sorted(
            {f"{r.candidate}: {f.id}" for r in read_reports(args.report) for f in r.findings}
        )
        raise UsageError(
            f"no finding {args.finding!r} in {args.report}; findings there: "
            + (", ".join(known) or "none")
        )
    device = resolve_device(args.device)
    failing = False
    replayed: list[AuditReport] = []
    for report in matches:
        finding = report.finding(args.finding)
        for change in files_changed_since(report):
            console.print(f"[yellow]{escape(change)}; the replay runs it as it is now[/]")
        drawn_otherwise = draws_changed_since(report)
        if drawn_otherwise:
            console.print(f"[yellow]{escape(drawn_otherwise)}[/]")
        problem = assuming(read_problem(report.problem_path), report.assumed)
        if report.candidate_source:
            problem, candidate = read_candidate(report.candidate_source, problem)
            problem = assuming(problem, report.assumed)
        else:
            candidate = CandidateRef(report.candidate_path, report.candidate_function)
        if finding.probe is None:
            console.print(f"{finding.id} was found {_how_found(finding.check, finding.key)}")
            console.print(f"recorded: {finding.title}")
            failing = failing or finding.severity == "fail"
            continue
        check = next(c for c in build_checks([finding.check]) if c.name == finding.check)
        if finding.probe.check == "gradients" and problem.contract.gradients:
            # found in the backward of an autograd-enabled candidate: differentiate again
            candidate = replace(candidate, autograd=autograd_signature(problem))
            problem = backward_problem(problem)
        console.print(f"replaying {finding.id} of {report.candidate} on {problem.name} ({device})")
        limits = limits_for(profile_named(report.profile), device)
        with Worker(candidate, device, limits=limits) as worker:
            observation = Executor(problem, worker, device).observe(finding.probe)
        failures = [f for f in check.judge(observation) if f.key == finding.key]
        console.print(f"recorded: {finding.title}")
        if failures:
            failing = failing or finding.severity == "fail"
            console.print("[bold red]reproduced[/]")
            again = [replace(finding, title=f.title, evidence=f.evidence) for f in failures]
            for each in again:
                print_evidence(console, each)
        else:
            console.print("[bold green]not reproduced[/]: the case passes now")
            passes = f"not reproduced, the case passes now: {finding.title}"
            again = [replace(finding, severity="note", title=passes)]
        verdict = "FAIL" if any(f.severity == "fail" for f in again) else "PASS"
        replayed.append(replace(report, findings=tuple(again), verdict=verdict, device=device))
    if getattr(args, "html", None) and replayed:
        write_html(replayed, args.html)
        console.print(f"HTML report of the replay: {args.html}")
    return 1 if failing else 0


def _how_found(check: str, key: str) -> str:
    """How a finding made without a case of its own was found, and how to find it again."""
    if check == "training":
        return (
            "by the training experiment, not in one case; `kernelaudit check --checks "
            "training` runs it again"
        )
    if key == "files-changed":
        return (
            "by reading the problem's and the candidate's files again after the audit; "
            "`kernelaudit check` reads them again"
        )
    return "in the candidate's source, not in a run; `kernelaudit check` scans the source again"


def files_changed_since(report: AuditReport) -> list[str]:
    """A sentence for each file of `report` (the problem, the candidate) whose sha256 is not
    the one the command read before the audit (`AuditReport.files_sha256`); none where the
    report recorded none."""
    recorded = dict(report.files_sha256)
    spec = report.candidate_source or f"{report.candidate_path}::{report.candidate_function}"
    job = Job(report.problem_path, spec, recorded.get("problem"), recorded.get("candidate"))
    return changed_files(job)


def draws_changed_since(report: AuditReport) -> str:
    """A sentence when the report's inputs were drawn another way than this kernelaudit draws
    them (`inputs.scheme.SCHEME`): the replayed case then holds other values than the audit's."""
    recorded = dict(report.environment)
    if not recorded:
        return ""  # a report that records no environment at all (made by hand, say)
    drawn_by = recorded.get(scheme.RECORDED_AS, "torch's generators")
    if drawn_by == scheme.SCHEME:
        return ""
    return (
        f"the report's inputs were drawn by {drawn_by}, this kernelaudit draws them by "
        f"{scheme.SCHEME}: the replayed case holds other values than the audit's, and a finding "
        "that depends on them may not come back"
    )
