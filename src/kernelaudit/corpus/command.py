"""`kernelaudit corpus`: audit every (problem, candidate) job of a manifest or a directory in
parallel, storing each result as it finishes; run it again to resume."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape

from kernelaudit.checks import REGISTRY, build_checks, refuse_unavailable
from kernelaudit.corpus.cluster import LOCAL, run_ray
from kernelaudit.corpus.jobs import Job, corpus_root, discover, keyed
from kernelaudit.corpus.pool import Place, local_places, run_local, visible_gpus
from kernelaudit.corpus.progress import job_line, progress
from kernelaudit.corpus.store import MAX_TRIES, Flight, JobResult, Store, StoredResult
from kernelaudit.corpus.summary import (
    candidate_label,
    first_line,
    job_label,
    print_summary,
    problem_label,
    summarise,
    untrusted_label,
)
from kernelaudit.errors import UsageError
from kernelaudit.findings import AuditReport, write_reports
from kernelaudit.interpret.versions import interpreter_defects
from kernelaudit.outputs import add_ci_options
from kernelaudit.profiles import PROFILES
from kernelaudit.report.caveats import covered
from kernelaudit.report.html import write_html
from kernelaudit.report.index import IndexEntry, entry_of, write_index
from kernelaudit.report.junit import Unaudited, write_junit
from kernelaudit.report.sarif import write_sarif
from kernelaudit.runner.auditor.sandbox import isolation

DEFAULT_DB = "kernelaudit-corpus.sqlite"
_RETRIED = {"error", "timeout", "crash", "tampered"}
"""The statuses `--rerun-errors` audits again."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `corpus` to the command line's subcommands."""
    corpus = subparsers.add_parser(
        "corpus",
        help="audit many (problem, candidate) pairs in parallel, resumably",
        description="Audit every job of a manifest or a corpus directory (see docs/corpus.md), "
        "one slot per GPU, storing each result in a SQLite database as it finishes. Run the "
        "same command again to resume: finished jobs are not audited again.",
    )
    corpus.add_argument(
        "source",
        nargs="?",
        metavar="SOURCE",
        help="a corpus directory, or a manifest (.jsonl, or .json list) of "
        '{"problem": ..., "candidate": ...}',
    )
    corpus.add_argument(
        "--db",
        type=Path,
        default=Path(DEFAULT_DB),
        help=f"the results database (default: {DEFAULT_DB})",
    )
    corpus.add_argument(
        "--reports",
        type=Path,
        help="folder for each job's JSON and HTML report (default: <db stem>-reports/ next to "
        "the database)",
    )
    corpus.add_argument(
        "--profile",
        default="default",
        choices=list(PROFILES),
        help="how hard to look (default: default)",
    )
    corpus.add_argument(
        "--checks",
        help="comma-separated checks to run (default: all): "
        + ", ".join(cls.name for cls in REGISTRY),
    )
    corpus.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="auto (default): every local GPU, else the CPU",
    )
    corpus.add_argument(
        "--workers",
        type=int,
        help="slots auditing at once (default: one per GPU; 1 on the CPU); more slots than "
        "GPUs share them in turn",
    )
    corpus.add_argument(
        "--job-timeout",
        type=_seconds,
        metavar="SECONDS",
        help="the longest one job may take: a job past it has its audit process killed and is "
        "stored as a timeout (default: no limit)",
    )
    corpus.add_argument("--rerun", action="store_true", help="audit every job again")
    corpus.add_argument(
        "--rerun-errors",
        action="store_true",
        help="audit again the jobs stored as an error, a timeout or a crash",
    )
    corpus.add_argument(
        "--rerun-unrunnable",
        action="store_true",
        help="audit again the jobs this or another machine found it could not run",
    )
    corpus.add_argument(
        "--ray",
        metavar="ADDRESS",
        help=f"run the jobs as tasks on a Ray cluster (e.g. auto), or on a Ray instance started "
        f"here ({LOCAL}, with --workers CPUs); needs kernelaudit[ray]",
    )
    corpus.add_argument(
        "--strict",
        action="store_true",
        help="refuse to audit where candidates cannot run in their sandbox (bubblewrap), and "
        "exit 1 if any job's candidate ran without it or a chosen check could not do its work "
        "where the job ran (a race check on a CPU)",
    )
    add_ci_options(corpus)
    corpus.add_argument(
        "--summary-only",
        action="store_true",
        help="print the summary of the database (of SOURCE's jobs, if given) without auditing",
    )
    corpus.set_defaults(run=run_corpus)


def run_corpus(args: argparse.Namespace, console: Console) -> int:
    """Audit the jobs not yet in the database, then summarise every result of SOURCE's jobs.
    Exit code 0 if every job passed, 1 if any failed or ended in an error."""
    checks = [c.strip() for c in args.checks.split(",")] if args.checks else None
    build_checks(checks)  # reject unknown names before any work starts
    db: Path = args.db
    if args.summary_only:
        if not db.is_file():
            raise UsageError(
                f"the database {db} does not exist; audit a corpus into it first "
                f"(`kernelaudit corpus SOURCE --db {db}`) or pass --db"
            )
        with Store(db) as store:
            jobs = None if args.source is None else _jobs(args, checks)
            return _summarise(console, store, jobs, args)
    if args.source is None:
        raise UsageError(
            "pass SOURCE, a corpus directory or a manifest; or --summary-only to summarise "
            "the database"
        )
    # the local slots' devices are this machine's: what cannot run here is refused
    places = [] if args.ray else _places(args.device, args.workers)
    refuse_unavailable(checks, [p.device for p in places], PROFILES[args.profile])
    here = isolation()
    if args.strict and not args.ray and not here.confined:
        raise UsageError(f"--strict: candidates cannot run in their sandbox here: {here.reason}")
    reports = _reports(args)
    db.parent.mkdir(parents=True, exist_ok=True)
    with Store(db) as store:
        jobs = _jobs(args, checks)
        stored = store.results()
        pending = _pending(jobs, {result.key: result.status for result in stored}, args)
        console.print(
            f"{len(jobs)} job(s) in {escape(str(args.source))}: {len(jobs) - len(pending)} "
            f"already in {escape(str(db))}, {len(pending)} to audit"
        )
        for row in store.untrusted(jobs.keys()):
            console.print(
                f"[bold red]not trusted[/] {escape(untrusted_label(row))}: "
                f"{escape(row.reason)}; audited again",
                highlight=False,
                soft_wrap=True,
            )
        for line in _changed_since_stored(pending, stored):
            console.print(line, highlight=False, soft_wrap=True)
        if args.rerun or args.rerun_errors or args.rerun_unrunnable:
            store.abandon([key for key, _ in pending])
        pending = _crash_stale(pending, store, args, checks, console)
        audited: list[AuditReport] = []
        if pending:
            reports.mkdir(parents=True, exist_ok=True)
            audited = _audit(pending, args, checks, store, reports, console, places)
            console.print(f"reports: {escape(str(reports))}")
        code = _summarise(console, store, jobs, args)
    unconfined = [report.isolation for report in audited if not report.confined]
    # what the jobs audited now could not verify where they ran; --strict counts it
    if not covered(audited, args.strict, console):
        code = 1
    if unconfined:
        console.print(
            f"[yellow]{len(unconfined)} job(s) ran their candidate without a sandbox: "
            f"{escape(unconfined[0])}[/]"
        )
        if args.strict:
            console.print("[red]--strict: exiting 1 because the sandbox could not run[/]")
            return 1
    return code


def _reports(args: argparse.Namespace) -> Path:
    db: Path = args.db
    return args.reports or db.with_name(f"{db.stem}-reports")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def _jobs(args: argparse.Namespace, checks: list[str] | None) -> dict[str, Job]:
    """SOURCE's jobs by key, their files read and hashed before any job starts."""
    source = Path(args.source)
    return keyed(discover(source, [_reports(args)]), args.profile, checks, corpus_root(source))


def _pending(
    jobs: dict[str, Job], stored: dict[str, str], args: argparse.Namespace
) -> list[tuple[str, Job]]:
    def wanted(key: str) -> bool:
        status = stored.get(key)
        return (
            status is None
            or args.rerun
            or (args.rerun_errors and status in _RETRIED)
            or (args.rerun_unrunnable and status == "unrunnable")
        )

    return [(key, job) for key, job in jobs.items() if wanted(key)]


def _changed_since_stored(pending: list[tuple[str, Job]], stored: list[StoredResult]) -> list[str]:
    """A line for each job to audit whose problem or candidate file has a stored result under
    other bytes: the file changed since, so the job is a new one and runs again."""
    latest = {(result.problem, result.candidate): result for result in stored}
    lines = []
    for _, job in pending:
        before = latest.get((job.problem, job.candidate))
        if before is None:
            continue
        changed = [
            f"its {what} {path}"
            for what, path, then, now in (
                ("problem", job.problem, before.problem_sha256, job.problem_sha256),
                ("candidate", job.candidate_file, before.candidate_sha256, job.candidate_sha256),
            )
            if then is not None and now is not None and then != now
        ]
        if changed:
            line = (
                f"{job_label(job.problem, job.candidate)}: {' and '.join(changed)} changed since "
                f"its result of {before.finished_at} was stored; its job runs again"
            )
            lines.append(f"[yellow]changed[/] {escape(line)}")
    return lines


def _crash_stale(
    pending: list[tuple[str, Job]],
    store: Store,
    args: argparse.Namespace,
    checks: list[str] | None,
    console: Console,
) -> list[tuple[str, Job]]:
    """Store as crashes the jobs that were in flight `MAX_TRIES` times when a run (or their
    slot) died; the others stay pending, those in flight once to be tried again."""
    flights = store.flights()
    left = []
    for key, job in pending:
        flight = flights.get(key)
        if flight is None or flight.tries < MAX_TRIES:
            left.append((key, job))
            continue
        result = _stale(key, job, flight)
        store.record(result, args.profile, checks)
        console.print(job_line(result, None), highlight=False, soft_wrap=True)
    return left


def _stale(key: str, job: Job, flight: Flight) -> JobResult:
    error = (
        f"the job was in flight {flight.tries} times (last at {flight.started_at}) and never "
        "finished: the run or its audit process died each time"
    )
    if flight.last_end:
        error += f"; an earlier try ended: {flight.last_end}"
    tail = flight.log_tail()
    return JobResult(
        key,
        job,
        None,
        f"{error}; the log {flight.log} ends with:\n{tail}" if tail else error,
        flight.device,
        None,
        "crash",
    )


def _audit(
    pending: list[tuple[str, Job]],
    args: argparse.Namespace,
    checks: list[str] | None,
    store: Store,
    reports: Path,
    console: Console,
    places: list[Place],
) -> list[AuditReport]:
    """Audit the pending jobs (in `places`, or on Ray); returns the reports of those that gave
    one."""
    audited: list[AuditReport] = []
    with progress(console, len(pending)) as advance:

        def finished(result: JobResult) -> None:
            # the reports first: a run killed in between redoes the job, and no stored row
            # ever lacks its reports
            if result.report is not None:
                report = AuditReport.from_json(result.report)
                audited.append(report)
                name = reports / result.key[:12]
                write_reports([report], name.with_suffix(".json"))
                write_html([report], name.with_suffix(".html"))
            store.record(result, args.profile, checks)
            console.print(job_line(result, advance()), highlight=False, soft_wrap=True)

        if args.ray:
            run_ray(
                pending,
                args.ray,
                args.device,
                args.profile,
                checks,
                finished,
                store,
                args.job_timeout,
                args.workers,
            )
            return audited
        console.print(
            f"auditing on {len(places)} slot(s): "
            + ", ".join(dict.fromkeys(p.label for p in places))
        )
        if any(p.device == "cpu" for p in places):
            for defect in interpreter_defects():
                console.print(f"[yellow]warning: {escape(defect)}.[/]")
        logs = reports / "slot-logs"
        run_local(pending, places, args.profile, checks, logs, finished, store, args.job_timeout)
    return audited


def _index(
    results: list[StoredResult],
    reports: dict[str, AuditReport],
    folder: Path,
    console: Console,
) -> None:
    """The reports folder's index page over the summarised jobs, each linked to its own."""
    if not results or not folder.is_dir():
        return
    entries = [
        entry_of(reports[r.key], folder / f"{r.key[:12]}.html")
        if r.key in reports
        else IndexEntry(
            problem_label(r.problem),
            candidate_label(r.candidate),
            r.status,
            None,
            headline=first_line(r.error),
            seconds=r.seconds,
        )
        for r in results
    ]
    write_index(entries, folder / "index.html")
    console.print(f"index of the reports: {escape(str(folder / 'index.html'))}")


def _ci_reports(
    results: list[StoredResult],
    audited: dict[str, AuditReport],
    args: argparse.Namespace,
    console: Console,
) -> None:
    """The JUnit XML and SARIF files the command line asks for, over the stored results."""
    if not (args.junit or args.sarif):
        return
    done = [r for r in results if r.key in audited]
    reports = [audited[r.key] for r in done]
    if args.junit:
        files = [_reports(args) / f"{r.key[:12]}.json" for r in done]
        unaudited = [
            Unaudited(
                problem_label(r.problem),
                candidate_label(r.candidate),
                r.status,
                r.error or "",
                r.seconds,
            )
            for r in results
            if r.key not in audited
        ]
        source = args.source or args.db
        write_junit(
            reports,
            args.junit,
            f"kernelaudit corpus {source}",
            report_path=[f if f.is_file() else None for f in files],
            unaudited=unaudited,
        )
        console.print(f"JUnit XML: {escape(str(args.junit))}")
    if args.sarif:
        write_sarif(reports, args.sarif)
        console.print(f"SARIF: {escape(str(args.sarif))}")


def _places(device: str, workers: int | None) -> list[Place]:
    gpus = torch.cuda.device_count() if device != "cpu" and torch.cuda.is_available() else 0
    if device == "cuda" and not gpus:
        raise UsageError("--device cuda was asked for but no CUDA device is visible; pass cpu")
    if not gpus:
        return local_places("cpu", workers, [])
    return local_places("cuda", workers, visible_gpus(gpus))


def _summarise(
    console: Console, store: Store, jobs: dict[str, Job] | None, args: argparse.Namespace
) -> int:
    keys = None if jobs is None else jobs.keys()
    results = store.results(keys)
    summary = summarise(results, store.untrusted(keys))
    print_summary(console, summary)
    folder = _reports(args)
    # each audited job's report, read from the store once for the index and the CI files
    wanted = folder.is_dir() or args.junit or args.sarif
    reports = {r.key: store.report(r.key) for r in results if r.status == "done"} if wanted else {}
    _index(results, reports, folder, console)
    _ci_reports(results, reports, args, console)
    missing = 0 if jobs is None else len(jobs) - len(results)
    if missing:
        console.print(f"{missing} job(s) have no result yet: run the command again to audit them")
    return 0 if summary.all_passed and not missing and not summary.untrusted else 1
