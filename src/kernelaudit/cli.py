"""The command line: `kernelaudit check | demo | repro | corpus | scan`.

Exit codes: 0 every candidate passed (for `demo`: every example behaved as expected), 1 a
candidate failed, 2 a usage error (malformed problem, missing candidate, bad option), 3 an
internal error (a defect of kernelaudit's, whose traceback is written to a file it names).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from rich.console import Console
from rich.markup import escape

from kernelaudit import __version__
from kernelaudit.checks import REGISTRY, refuse_unavailable
from kernelaudit.corpus.command import add_parser as add_corpus_parser
from kernelaudit.corpus.jobs import Job as ReadJob
from kernelaudit.corpus.jobs import changed_files
from kernelaudit.demo import find_examples, load_examples
from kernelaudit.engine.audit import audit_in_turn, resolve_device, sm_count
from kernelaudit.engine.budget import expected_all, time_left
from kernelaudit.engine.lanes import Job, audit_in_lanes, deal, lane_count, most_lanes
from kernelaudit.engine.pace import at_this_pace, record_pace, recorded_pace
from kernelaudit.engine.progress import ProgressEvent
from kernelaudit.errors import UsageError
from kernelaudit.findings import AuditReport, with_files_changed
from kernelaudit.formats import read_candidate, read_problem, unrunnable
from kernelaudit.formats.solexecbench.trace import write_traces
from kernelaudit.guarding.demonstration import GuardRun, demonstrate, show_demonstration
from kernelaudit.inputs.recorded import with_recorded
from kernelaudit.interpret.versions import interpreter_defects
from kernelaudit.outputs import (
    add_output_options,
    check_outputs,
    load_figures_ahead,
    write_outputs,
    written,
)
from kernelaudit.problem.domain import assuming, parse_assumption
from kernelaudit.problem.spec import Problem
from kernelaudit.profiles import PROFILES, profile_named, profile_with_budget
from kernelaudit.report.caveats import covered, isolated
from kernelaudit.report.terminal import (
    cpu_timings_left_out,
    expectations_table,
    print_findings,
    progress_bar,
    verdict_table,
)
from kernelaudit.repro import replay
from kernelaudit.runner.auditor import prestart
from kernelaudit.runner.boundary.ending import end_now
from kernelaudit.runner.candidate import CandidateRef
from kernelaudit.tripwires.command import add_parser as add_scan_parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    # a pipe or CI log has no width of its own: give tables room rather than 80 columns
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    errors = Console(stderr=True, highlight=False)
    try:
        check_outputs(args)
        return int(args.run(args, console))
    except UsageError as error:
        errors.print(f"[bold red]error:[/] {escape(str(error))}", soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        written = _traceback_file()
        errors.print(
            f"[bold red]internal error[/] (a defect of kernelaudit's, not a verdict on any "
            f"kernel): {escape(type(error).__name__)}: {escape(str(error))}\n"
            f"the traceback is in {written}; please include it when reporting the defect",
            soft_wrap=True,
        )
        return 3


def _traceback_file() -> str:
    """Write the exception being handled to a file of its own; that file's name."""
    handle, name = tempfile.mkstemp(prefix="kernelaudit-internal-error-", suffix=".txt")
    with os.fdopen(handle, "w") as file:
        file.write(f"kernelaudit {__version__}, Python {sys.version.split()[0]}\n")
        file.write(traceback.format_exc())
    return name


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelaudit",
        description="Audit GPU kernels against fp64 truth across adversarial inputs, shapes "
        "and layouts.",
    )
    parser.add_argument("--version", action="version", version=f"kernelaudit {__version__}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    check = sub.add_parser("check", help="audit candidates against a problem")
    check.add_argument(
        "problem",
        help="problem: a .py defining `problem = Problem(...)`, a SOL-ExecBench problem folder "
        "(or its definition.json), or a KernelBench problem .py (Model, get_inputs)",
    )
    check.add_argument(
        "candidates",
        nargs="+",
        metavar="CANDIDATE",
        help="candidate: path/file.py::function, a SOL-ExecBench solution.json, or a "
        "KernelBench file defining ModelNew",
    )
    _common(check)
    check.add_argument(
        "--checks",
        help="comma-separated checks to run (default: all): "
        + ", ".join(cls.name for cls in REGISTRY),
    )
    check.add_argument(
        "--case",
        action="append",
        default=[],
        type=Path,
        metavar="RECORD",
        help="a failing call a guard recorded (kernelaudit.guard, records=DIR): its real inputs "
        "are audited first, as a case of their own (repeatable)",
    )
    check.add_argument(
        "--assume",
        action="append",
        default=[],
        metavar="INPUT=PROPERTIES",
        help="what the kernel's callers guarantee about one input, so the audit draws nothing "
        "outside it (repeatable): finite, positive, range:LOW:HIGH, contiguous, min_kept:N "
        "(masks), sorted, unique, below:INPUT (ids), comma-separated, e.g. --assume "
        "logits=finite,contiguous. "
        "Reports list it",
    )
    check.add_argument(
        "--trace",
        type=Path,
        help="also write SOL-ExecBench JSONL traces (one line per workload and candidate) to "
        "this file, with kernelaudit's findings in each line's correctness.extra",
    )
    check.set_defaults(run=_check)

    demo = sub.add_parser("demo", help="audit the bundled examples and print the summary")
    _common(demo, default_profile="quick")
    demo.add_argument(
        "--lanes",
        type=_positive,
        help="audit this many problems at once, each in a process of its own (default: one per "
        "core on a CPU, one per GPU on a host with several)",
    )
    demo.add_argument("--examples", type=Path, help="examples folder (default: the checkout's)")
    demo.set_defaults(run=_demo)

    repro = sub.add_parser(
        "repro", help="rerun one finding from a JSON report, or a guard's failing call"
    )
    repro.add_argument(
        "report",
        type=Path,
        help="JSON report written by check or demo, or a record a guard wrote (RECORD.json)",
    )
    repro.add_argument(
        "finding", nargs="?", default=None, help="finding id, e.g. F1 (not for a guard's record)"
    )
    repro.add_argument("--device", default="auto", help="auto (default), cpu or cuda[:N]")
    repro.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write the replayed finding, with its evidence as it is now, as an HTML page",
    )
    repro.set_defaults(run=replay)
    add_corpus_parser(sub)
    add_scan_parser(sub)
    return parser


def _common(parser: argparse.ArgumentParser, default_profile: str = "default") -> None:
    parser.add_argument(
        "--profile",
        default=default_profile,
        choices=list(PROFILES),
        help=f"how hard to look (default: {default_profile})",
    )
    parser.add_argument("--device", default="auto", help="auto (default), cpu or cuda[:N]")
    parser.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="time to plan each candidate's audit for, overriding the profile's (quick 10, "
        "default 30, thorough 300, for an H100); optional cases beyond it are left untried and "
        "listed in the report, and past ten times it even cases every audit runs (their checks "
        "then not verified)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when candidates could not run in their sandbox (bubblewrap) or a chosen "
        "check could not run here (a race check on a CPU), could not settle what it measured, "
        "or had cases every audit runs left out by the time budget, whatever the verdicts",
    )
    add_output_options(parser)


def _audit_all(
    jobs: list[tuple[Problem, CandidateRef]],
    args: argparse.Namespace,
    console: Console,
    checks: list[str] | None = None,
    announce: bool = False,
    named: list[Job] | None = None,
    read: tuple[ReadJob, ...] = (),
    idle: Callable[[], None] | None = None,
    sections: dict[int, str] | None = None,
) -> list[AuditReport]:
    """Audit every job, in lanes of their own when `named` gives the jobs as the command line
    named them and more than one lane suits (`--lanes`). `read`: each job's files as they were
    read before any candidate ran; a job whose files changed by the end of its audit fails
    (`with_files_changed`). In lanes, `idle` is called once a lane has nothing left to take,
    and `sections` gets each report's HTML section, by position, drawn in its lane."""
    profile = profile_with_budget(args.profile, args.budget)
    device = resolve_device(args.device)
    lanes = 1 if named is None else (args.lanes or lane_count(device, named))
    if device.startswith("cuda") and lanes > most_lanes(device):
        raise UsageError(
            f"--lanes {lanes} on {device}: each lane's candidate may take three quarters of its "
            f"GPU's memory, so give at most one lane per GPU ({most_lanes(device)})"
        )
    if not device.startswith("cuda"):
        for defect in interpreter_defects():
            console.print(f"[yellow]warning: {escape(defect)}.[/]")
    estimates: list[float] = []
    if announce or lanes > 1:
        trains = checks is None or "training" in checks
        estimates = expected_all(jobs, profile, device, sm_count(device), trains=trains)
    if announce:
        across = f" in {lanes} lanes" if lanes > 1 else ""
        seconds, how = at_this_pace(sum(estimates) / lanes, device)
        console.print(
            f"auditing {len(jobs)} candidates with the {profile.name} profile on {device}"
            f"{across}: about {_duration(seconds)} {how}"
        )

    def done(report: AuditReport) -> None:
        console.print(
            f"{report.verdict:4}  {escape(report.problem)} / {escape(report.candidate)}  "
            f"({len(report.records)} cases, {report.seconds:.1f} s)"
        )

    reports: list[AuditReport] = []
    began = time.perf_counter()
    with progress_bar(console) as bar:
        if named is not None and lanes > 1:
            arrivals: dict[int, float] = {}
            dealt = deal(named, estimates)  # as the lanes take them
            ended: dict[str, float] = {}  # when each problem's audits ended

            def arrived(position: int, report: AuditReport) -> None:
                arrivals[position] = report.seconds
                spent = time.perf_counter() - began
                ended.setdefault(named[position].problem, spent)
                done(report)
                what = f"{len(arrivals)} of {len(jobs)} candidates audited"
                if len(arrivals) < len(jobs):
                    pace = recorded_pace(device)
                    left = time_left(
                        estimates, arrivals, lanes, spent, pace, dealt, list(ended.values())
                    )
                    what += (
                        f", about {_duration(left)} left at this machine's pace"
                        if left >= 1.0
                        else ", the rest past the time expected of it"
                    )
                bar(f"{lanes} lanes", ProgressEvent("check", len(arrivals), len(jobs), what))

            log = not console.is_terminal
            bar(f"{lanes} lanes", ProgressEvent("check", 0, len(jobs), "candidates audited"))
            reports = audit_in_lanes(
                named,
                profile,
                device,
                lanes,
                checks,
                log,
                arrived,
                estimates=estimates,
                idle=idle,
                drawn=None if sections is None else sections.__setitem__,
            )
        else:

            def progress(event: ProgressEvent) -> None:
                problem, candidate = jobs[len(reports)]
                bar(f"{problem.name} / {candidate.function}", event)

            for report in audit_in_turn(jobs, profile, device, checks, progress):
                if read:
                    report = _as_read(report, read[len(reports)])
                reports.append(report)
                done(report)
    if announce:  # this machine's pace, for the next run's announcement
        # the wall time against the estimate announced: lanes that end unevenly, and the
        # worker starts between audits, are this machine's pace too
        record_pace(device, sum(estimates) / lanes, time.perf_counter() - began)
    return reports


def _as_read(report: AuditReport, read: ReadJob) -> AuditReport:
    """`report` with the digests of the files its command read before any candidate ran, and
    failed where they changed by the end of its audit."""
    report = with_files_changed(report, changed_files(read))
    digests = (("problem", read.problem_sha256), ("candidate", read.candidate_sha256))
    return replace(report, files_sha256=tuple((k, v) for k, v in digests if v))


def _check(args: argparse.Namespace, console: Console) -> int:
    checks = [c.strip() for c in args.checks.split(",")] if args.checks else None
    device = resolve_device(args.device)
    # and unknown names, before any work starts
    refuse_unavailable(checks, [device], profile_named(args.profile))
    read = prestart.files_as_read(args.problem, args.candidates)
    assumed = [parse_assumption(text) for text in args.assume]  # refused before any work
    problem = assuming(read_problem(args.problem), [(n, d.describe()) for n, d in assumed])
    reason = unrunnable(problem)
    if reason is not None:
        raise UsageError(f"problem {problem.name!r} cannot run on this machine: {reason}")
    jobs = [read_candidate(spec, problem) for spec in args.candidates]
    # a reader may refine the problem for its candidate: the assumptions hold there too, and
    # the recorded calls are its cases
    jobs = [(with_recorded(assuming(p, problem.assumed), args.case), ref) for p, ref in jobs]
    load_figures_ahead(device)
    reports = _audit_all(jobs, args, console, checks, read=read)
    write_outputs(reports, args, "kernelaudit check")
    console.print(verdict_table(reports))
    for report in reports:
        print_findings(console, report, str(args.json))
    cpu_timings_left_out(console, reports)
    console.print("\n" + written(args))
    if args.trace:
        write_traces([(p, r) for (p, _), r in zip(jobs, reports, strict=True)], args.trace)
        console.print(f"SOL-ExecBench traces: {args.trace}")
    # both always speak (`&`, not `and`): each says what the run did not guarantee
    if not (isolated(reports, args.strict, console) & covered(reports, args.strict, console)):
        return 1
    return 0 if all(r.verdict == "PASS" for r in reports) else 1


def _demo(args: argparse.Namespace, console: Console) -> int:
    examples = load_examples(find_examples(args.examples))
    problems = {path: read_problem(path) for path in dict.fromkeys(e.problem for e in examples)}
    jobs = [read_candidate(e.candidate, problems[e.problem]) for e in examples]
    named = [Job(str(e.problem), e.candidate) for e in examples]
    # the guard's demonstration (child processes of its own) starts as soon as a lane is idle,
    # and each report's HTML section is drawn in its lane: neither waits for the last audit
    background = ThreadPoolExecutor(2, thread_name_prefix="demo")
    demonstration: list[Future[list[GuardRun]]] = []

    def demonstrate_guard() -> None:
        if not demonstration:
            where = find_examples(args.examples)
            demonstration.append(background.submit(demonstrate, where, resolve_device(args.device)))

    sections: dict[int, str] = {}
    try:
        reports = _audit_all(
            jobs,
            args,
            console,
            announce=True,
            named=named,
            idle=demonstrate_guard,
            sections=sections,
        )
        demonstrate_guard()
        drawn = [sections.get(k) for k in range(len(reports))]
        written_out = background.submit(write_outputs, reports, args, "kernelaudit demo", drawn)
        console.print(expectations_table(examples, reports, args.profile))
        for report in reports:
            print_findings(console, report, str(args.json), limit=1)
        cpu_timings_left_out(console, reports)
        all_met = all(e.met_by(r) for e, r in zip(examples, reports, strict=True))
        all_met &= show_demonstration(demonstration[0].result(), console)
        written_out.result()
    finally:
        background.shutdown(cancel_futures=True)
    console.print("\n" + written(args))
    console.print(
        "every example behaved as expected"
        if all_met
        else "[bold red]some examples did not behave as expected[/]"
    )
    # both always speak (`&`, not `and`): each says what the run did not guarantee
    if not (isolated(reports, args.strict, console) & covered(reports, args.strict, console)):
        return 1
    return 0 if all_met else 1


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}" if minutes else f"{seconds:.0f} s"


_QUICK_EXIT = frozenset({"check", "demo"})
"""Commands whose process ends at once when they are done: by then every report is written and
every process they started is gone, and what is left (tearing down torch's modules and the
device's context, a second or more) is of no use to anyone waiting for the verdict. Other
commands end as Python ends (`corpus` may have a Ray cluster to stop)."""


def run() -> NoReturn:
    """The `kernelaudit` command: `main` on the command line's arguments, then the exit."""
    arguments = sys.argv[1:]
    try:
        code = main(arguments)
    finally:
        prestart.discard()
    if arguments and arguments[0] in _QUICK_EXIT:
        end_now(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
