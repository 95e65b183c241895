"""One audit slot: a long-lived process that audits one job at a time, for as long as the corpus
run that started it lives.

    python -m kernelaudit.corpus.slot --parent PID --device cpu|cuda --profile P [--checks a,b]

It reads jobs as JSON lines on stdin (`job_message`), first answers {"ready": true} once it
can audit, then one JSON line per job on stdout: {"key", "report", "seconds"}, {"key", "error",
"seconds"}, {"key", "unrunnable", "seconds"} (why this device cannot run the problem) or {"key",
"tampered", "seconds"} (which of the job's files changed since the run read them). It ends when
stdin closes, and at once when its parent dies (an audit in progress would otherwise keep it
alive until the job ends)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from kernelaudit.corpus.jobs import Job, changed_files
from kernelaudit.corpus.runnable import why_unrunnable
from kernelaudit.corpus.store import JobResult
from kernelaudit.engine.audit import audit
from kernelaudit.errors import UsageError
from kernelaudit.findings import report_document
from kernelaudit.formats import read_candidate, read_problem
from kernelaudit.problem.spec import Problem
from kernelaudit.report.terminal import progress_bar
from kernelaudit.runner.auditor.sandbox import isolation
from kernelaudit.runner.boundary.ending import end_with_the_parent

_KEPT_PROBLEMS = 8
"""Problems a slot keeps read, the most recently audited: what their candidates share."""

_READ: OrderedDict[tuple[str, str], Problem] = OrderedDict()


def job_message(key: str, job: Job) -> dict[str, str | None]:
    """What a slot (or a Ray task) is handed to audit a job: its key, its files, and their
    sha256 as the run read them."""
    return {
        "key": key,
        "problem": job.problem,
        "candidate": job.candidate,
        "problem_sha256": job.problem_sha256,
        "candidate_sha256": job.candidate_sha256,
    }


def run_job(
    message: dict[str, Any], profile: str, checks: list[str] | None, device: str
) -> dict[str, Any]:
    """Audit one job (`job_message`) and return its answer: the report as a strict JSON
    document, why the problem cannot run on `device`, the error that stopped the audit, or which
    of its files changed since the run read them (before the audit or during it: no verdict
    then). Shared by the local slots and Ray's tasks."""
    began = time.perf_counter()
    job = Job(
        message["problem"],
        message["candidate"],
        message.get("problem_sha256"),
        message.get("candidate_sha256"),
    )
    changed = changed_files(job)
    answer = {} if changed else _audited(job, profile, checks, device)
    changed = changed or changed_files(job)
    if changed:
        _READ.pop((job.problem, job.problem_sha256 or ""), None)  # read again if it comes back
        answer = {"tampered": "; ".join(changed) + ": no verdict on files that changed"}
    return {"key": message["key"], **answer, "seconds": time.perf_counter() - began}


def _audited(job: Job, profile: str, checks: list[str] | None, device: str) -> dict[str, Any]:
    """The report, why the problem cannot run here, or the error, as `run_job` answers them."""
    try:
        problem = _problem(job)
        reason = why_unrunnable(problem, device)
        if reason is not None:
            return {"unrunnable": reason}
        problem, candidate = read_candidate(job.candidate, problem)
        # each phase and check as a line in the slot's log, so a long job shows where it is
        with progress_bar(Console(file=sys.stderr, width=160, highlight=False)) as log:
            label = f"{problem.name} / {candidate.function}"
            report = audit(problem, candidate, profile, device, checks, lambda e: log(label, e))
    except UsageError as error:
        return {"error": str(error)}
    except Exception as error:
        # not the user's input but kernelaudit itself: keep the traceback for a bug report
        traceback.print_exc()
        return {"error": f"kernelaudit failed while auditing: {type(error).__name__}: {error}"}
    return {"report": report_document(report)}


def _problem(job: Job) -> Problem:
    """The job's problem, read once a slot for each file and sha256 the run recorded, so the
    audits of a problem's candidates share what is inferred from its reference once a process
    (its batch axes: seconds to a minute of float64 on the host for a heavy reference, each
    candidate). Read afresh for a job without a recorded sha256, and wherever candidates run
    without the sandbox: a candidate could then rewrite the problem while it is read and put
    it back, and what was read would be every later candidate's problem too."""
    if job.problem_sha256 is None or not isolation().confined:
        return read_problem(job.problem)
    key = (job.problem, job.problem_sha256)
    if key in _READ:
        _READ.move_to_end(key)
        return _READ[key]
    problem = _READ[key] = read_problem(job.problem)
    while len(_READ) > _KEPT_PROBLEMS:
        _READ.popitem(last=False)
    return problem


def result_of(key: str, job: Job, answer: dict[str, Any], device: str) -> JobResult:
    """The result an answer of `run_job` stands for."""
    unrunnable, tampered = answer.get("unrunnable"), answer.get("tampered")
    return JobResult(
        key,
        job,
        answer.get("report"),
        unrunnable or tampered or answer.get("error"),
        device,
        float(answer["seconds"]),
        "unrunnable" if unrunnable else "tampered" if tampered else "",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelaudit.corpus.slot")
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--profile", required=True)
    parser.add_argument("--checks", default="")
    args = parser.parse_args(argv)
    # the answers get a channel of their own: whatever an audit, a reference or a library
    # prints goes to stderr (the slot's log), never between two answers
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    end_with_the_parent(args.parent)
    checks = args.checks.split(",") if args.checks else None
    channel.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        answer = run_job(json.loads(line), args.profile, checks, args.device)
        channel.write(json.dumps(answer, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
