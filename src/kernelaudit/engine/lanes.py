"""Audits spread over lanes: processes of their own, each auditing one problem's candidates in
turn and then the next problem, so that a machine with several cores (or GPUs) audits several
candidates at once.

A lane takes whole problems, so what is kept per problem in a process (the training check's
reference runs, Triton's compiled kernels) is computed once; the problems expected to take
longest go first, each to the first lane that is free (so the lanes end close together), and
each problem's reports come back as soon as it is done, with their HTML sections drawn in the
lane where asked (the figures are most of an HTML report's cost, and a lane draws them while
the others still audit). On a CPU each lane takes its share of the cores (`runner.auditor.threads`);
on a host with several GPUs each lane takes one GPU.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

import torch

from kernelaudit.engine.progress import ProgressEvent
from kernelaudit.findings import AuditReport, report_document
from kernelaudit.profiles import Profile
from kernelaudit.runner.auditor.threads import THREADS_VARIABLE, host_share
from kernelaudit.runner.boundary.ending import end_now, end_with_the_parent

_WAKE_S = 0.5
"""The longest the lanes' results are waited for at a time."""


@dataclass(frozen=True)
class Job:
    """One candidate to audit, as the command line names it."""

    problem: str
    candidate: str


def most_lanes(device: str) -> int:
    """The most lanes this machine takes: one per core on a CPU (each audit's candidate runs in
    a worker process while its auditor waits); on GPUs one per GPU, since each lane's
    candidate may take three quarters of its GPU's memory ("cuda:N" names one GPU)."""
    if device.startswith("cuda"):
        return torch.cuda.device_count() if device == "cuda" and torch.cuda.is_available() else 1
    return host_share()


def lane_count(device: str, jobs: list[Job]) -> int:
    """How many lanes suit these jobs here: `most_lanes`, never more than the problems."""
    return max(1, min(len({job.problem for job in jobs}), most_lanes(device)))


def deal(jobs: list[Job], estimates: Sequence[float] = ()) -> list[list[int]]:
    """The jobs' positions, by problem: the problems whose candidates' `estimates` (seconds,
    one per job) sum highest first, then those with the most candidates. Handed out in this
    order to whichever lane is free, the longest problems start first and the short ones fill
    the lanes' ends."""
    by_problem: dict[str, list[int]] = {}
    for position, job in enumerate(jobs):
        by_problem.setdefault(job.problem, []).append(position)

    def expected(positions: list[int]) -> tuple[float, int]:
        seconds = sum(estimates[p] for p in positions) if estimates else 0.0
        return seconds, len(positions)

    return sorted(by_problem.values(), key=expected, reverse=True)


def audit_in_lanes(
    jobs: list[Job],
    profile: Profile,
    device: str,
    lanes: int,
    checks: list[str] | None = None,
    log: bool = False,
    finished: Callable[[int, AuditReport], None] | None = None,
    estimates: Sequence[float] = (),
    idle: Callable[[], None] | None = None,
    drawn: Callable[[int, str], None] | None = None,
) -> list[AuditReport]:
    """Audit every job in `lanes` processes; the reports in the jobs' order, finding ids
    numbered by job ("C3.F1") as one run would number them. `finished` is told of each report
    as its problem's audits end (its job's position first). With `log`, each lane prints a line
    per phase and check of its audits (for logs and pipes; a terminal shows `finished` alone).
    On a host with several GPUs, lane k audits on GPU k.

    estimates: each job's expected seconds, which order the problems (`deal`). idle: called
    once, as soon as a lane has no problem left to take (work that does not need every lane
    can start there). drawn: told of each report's HTML section (`report.html.section`, its
    job's position first), drawn in its lane."""
    problems = deal(jobs, estimates)
    lanes = max(1, min(lanes, len(problems)))
    threads = max(1, host_share() // lanes)
    reports: dict[int, AuditReport] = {}
    context = multiprocessing.get_context("spawn")
    devices = context.Queue()
    for index in range(lanes):
        devices.put(_lane_device(device, index))
    with ProcessPoolExecutor(
        lanes,
        mp_context=context,
        initializer=_take_device,
        initargs=(devices, threads, os.getpid()),
    ) as pool:
        pending = {
            pool.submit(
                _audit_problem,
                [(position, jobs[position]) for position in positions],
                profile,
                checks,
                log,
                len(jobs),
                drawn is not None,
            )
            for positions in problems
        }
        while pending:
            # a bounded wait: a signal the pool's own threads take is acted on only once the
            # main thread runs again (see `corpus.pool.WAKE_S`)
            done, pending = wait(pending, timeout=_WAKE_S, return_when=FIRST_COMPLETED)
            for future in done:
                for position, document, section in future.result():
                    report = AuditReport.from_json(document)
                    reports[position] = report
                    if finished is not None:
                        finished(position, report)
                    if drawn is not None:
                        drawn(position, section)
            if idle is not None and len(pending) < lanes:
                idle()
                idle = None
    return [reports[position] for position in range(len(jobs))]


def _lane_device(device: str, index: int) -> str:
    if device == "cuda" and torch.cuda.is_available() and torch.cuda.device_count() > 1:
        return f"cuda:{index % torch.cuda.device_count()}"
    return device


_LANE_DEVICE = "cpu"
"""The device of the lane this process is (set once, when the lane starts)."""


def _take_device(devices: Any, threads: int, parent: int) -> None:
    """A lane's start: the device it audits on, and its share of the cores; its end at once,
    when the pool lets it go (`_end_at_once`), and with the command that started it (`parent`),
    should that be killed before it can let it go."""
    global _LANE_DEVICE
    end_with_the_parent(parent)
    _LANE_DEVICE = devices.get()
    os.environ[THREADS_VARIABLE] = str(threads)
    atexit.register(_end_at_once)


def _end_at_once() -> None:
    """The lane's last act, once the pool has let it go and its results are sent: tearing down
    torch's modules and the device's context (a second or two, which the command waits for)
    is of no use to anyone, so the process ends without it. Registered as the lane starts, it
    runs after every exit hook its audits registered, and in place of those its imports
    registered before it (torch's among them)."""
    end_now(0)


def _audit_problem(
    jobs: list[tuple[int, Job]],
    profile: Profile,
    checks: list[str] | None,
    log: bool,
    total: int,
    draw: bool,
) -> list[tuple[int, dict[str, Any], str]]:
    """One problem's audits, in a lane: the reports as strict JSON documents, each with its
    HTML section where `draw` ("" otherwise), drawn from the report as the document gives it
    back, so that it is the section the whole page would draw."""
    # imported here: the lane is a fresh process, and these import the checks
    from rich.console import Console

    from kernelaudit.engine.audit import audit_in_turn
    from kernelaudit.formats import read_candidate, read_problem
    from kernelaudit.report.html import section
    from kernelaudit.report.terminal import progress_bar

    problem = read_problem(jobs[0][1].problem)
    read = [read_candidate(job.candidate, problem) for _, job in jobs]
    console = Console(file=sys.stdout, width=160, highlight=False, force_terminal=False)
    answers: list[tuple[int, dict[str, Any], str]] = []
    with progress_bar(console) as bar:

        def progress(event: ProgressEvent) -> None:
            if log:
                problem, candidate = read[len(answers)]
                bar(f"{problem.name} / {candidate.function}", event)

        audits = audit_in_turn(read, profile, _LANE_DEVICE, checks, progress)
        for (position, _), report in zip(jobs, audits, strict=True):
            document = report_document(_numbered(report, position, total))
            drawn = section(AuditReport.from_json(document), position) if draw else ""
            answers.append((position, document, drawn))
    return answers


def _numbered(report: AuditReport, position: int, total: int) -> AuditReport:
    """The report with finding ids as a run of all `total` jobs gives them ("C3.F1")."""
    if total < 2:
        return report
    findings = tuple(
        replace(f, id=f"C{position + 1}.{f.id.rsplit('.', 1)[-1]}") for f in report.findings
    )
    return replace(report, findings=findings)
