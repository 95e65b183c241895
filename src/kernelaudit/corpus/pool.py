"""The local scheduler: runs pending jobs on one slot process per GPU (or `--workers` CPU
slots), each auditing one job at a time, and hands each result over the moment it arrives. A job
past its time limit has its slot killed; a slot that dies mid-job has the job tried once more."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from kernelaudit.corpus.jobs import Job
from kernelaudit.corpus.slot import job_message, result_of
from kernelaudit.corpus.store import MAX_TRIES, Flight, JobResult
from kernelaudit.errors import UsageError
from kernelaudit.runner.auditor.launch import child_environment
from kernelaudit.runner.auditor.threads import thread_environment, usable_cores

OnResult = Callable[[JobResult], None]


class Departures(Protocol):
    """Where jobs handed out are recorded (the store), so that one in flight when its slot or
    the whole run died is known on the next run."""

    def depart(self, flight: Flight) -> int:
        """Record the hand-out; return how many times the job has been handed out without a
        result, this one included."""
        ...

    def ended(self, key: str, how: str) -> None:
        """Record how a try of the job ended without a result (before it is tried again)."""
        ...

    def abandon(self, keys: Collection[str]) -> None:
        """Forget hand-outs that ended through no fault of the job (the run interrupted)."""
        ...


_Answers = queue.Queue[tuple["_Slot", "subprocess.Popen[str]", "str | None"]]
"""What slot readers pass to the run: the slot, its process, and a line (None: it ended)."""

_STOP_GRACE_S = 5.0

WAKE_S = 0.5
"""The longest the run waits for its slots' answers at a time. A signal sent to the run (a
user's Ctrl-C) may be taken by one of the threads that read the slots, and Python acts on it
only in the main thread, once that thread runs again: a wait with no end left an interrupted
run blocked for as long as its slots said nothing, for good with a job whose problem hangs
(`tests/corpus/test_corpus_recovery.py`)."""


@dataclass(frozen=True)
class Place:
    """Where a slot audits: `device` as the audit sees it, `visible` the CUDA_VISIBLE_DEVICES
    entry that pins it to one GPU (None on the CPU), `label` as the store records it."""

    device: str
    visible: str | None
    label: str


def local_places(device: str, workers: int | None, gpus: list[str]) -> list[Place]:
    """The slots to start: on GPUs, one per GPU (or `workers`, taking the GPUs in turn), on
    the CPU `workers` (default 1)."""
    if workers is not None and workers < 1:
        raise UsageError(f"--workers {workers}: pass 1 or more")
    if device == "cpu":
        return [Place("cpu", None, "cpu")] * (workers or 1)
    count = workers or len(gpus)
    return [Place("cuda", gpus[i % len(gpus)], f"cuda:{gpus[i % len(gpus)]}") for i in range(count)]


def visible_gpus(count: int) -> list[str]:
    """The CUDA_VISIBLE_DEVICES entry of each of the `count` GPUs this process sees, so that
    a run confined by the user to some GPUs keeps to them."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in listed.split(",") if e.strip()] if listed else []
    return entries[:count] if entries else [str(i) for i in range(count)]


def run_local(
    jobs: list[tuple[str, Job]],
    places: list[Place],
    profile: str,
    checks: list[str] | None,
    logs: Path,
    on_result: OnResult,
    departures: Departures,
    job_timeout: float | None = None,
) -> None:
    """Audit `jobs` (key, job) on one slot process per place, recording each hand-out in
    `departures`. A job past `job_timeout` seconds (counted from when its slot is ready) has
    its slot's process group killed and is a timeout; a slot that dies mid-job is started
    again and the job handed out again, until it has been tried `MAX_TRIES` times, then it is
    a crash with the end of the slot's log."""
    pending = deque(jobs)
    answers: _Answers = queue.Queue()
    logs.mkdir(parents=True, exist_ok=True)
    places = places[: len(jobs)]
    # slots share the host's cores: without a limit each audit's thread pools take all of them
    threads = thread_environment(max(1, usable_cores() // max(1, len(places))))
    slots = [
        _Slot(place, logs / f"slot-{i}.log", profile, checks, threads, answers, departures)
        for i, place in enumerate(places)
    ]
    try:
        for slot in slots:
            slot.start()
            slot.give(pending)
        while any(slot.job is not None for slot in slots):
            try:
                overdue = _until_overdue(slots, job_timeout)
                wait = WAKE_S if overdue is None else min(overdue, WAKE_S)
                slot, process, line = answers.get(timeout=wait)
            except queue.Empty:
                for slot in slots:
                    if job_timeout is not None and slot.overdue(job_timeout):
                        on_result(slot.timed_out(job_timeout))
                        if pending:
                            slot.start()
                        slot.give(pending)
                continue
            if process is not slot.process:
                continue  # the last words of a slot already replaced
            if line is None:
                if slot.job is not None:
                    job, tries = slot.job, slot.tries
                    result = slot.died(tries)
                    if tries < MAX_TRIES:
                        departures.ended(job[0], result.error or "")
                        pending.appendleft(job)
                    else:
                        on_result(result)
                slot.reap()
                if pending:
                    slot.start()
            else:
                answer = json.loads(line)
                if answer.get("ready"):
                    slot.now_ready()
                    continue
                on_result(slot.answered(answer))
            slot.give(pending)
    except BaseException:
        # an interrupted run is not its jobs' fault: they start afresh next time
        departures.abandon([slot.job[0] for slot in slots if slot.job is not None])
        raise
    finally:
        for slot in slots:
            slot.stop()


def _until_overdue(slots: list[_Slot], job_timeout: float | None) -> float | None:
    """Seconds until the first busy slot passes the time limit (None: no limit to watch)."""
    if job_timeout is None:
        return None
    began = [slot.began for slot in slots if slot.job is not None and slot.began is not None]
    if not began:
        return None
    return max(0.0, min(began) + job_timeout - time.perf_counter())


class _Slot:
    """One slot process and the job it is auditing."""

    def __init__(
        self,
        place: Place,
        log: Path,
        profile: str,
        checks: list[str] | None,
        threads: dict[str, str],
        answers: _Answers,
        departures: Departures,
    ) -> None:
        self.place = place
        self.log = log
        self.argv = [
            sys.executable,
            "-m",
            "kernelaudit.corpus.slot",
            "--parent",
            str(os.getpid()),
            "--device",
            place.device,
            "--profile",
            profile,
            "--checks",
            ",".join(checks or ()),
        ]
        self.threads = threads
        self.answers = answers
        self.departures = departures
        self.process: subprocess.Popen[str] | None = None
        self.ready = False
        """Whether the process said it can audit: one that ends before is broken, not its job."""
        self.job: tuple[str, Job] | None = None
        self.tries = 0
        """How many times the job in hand has been handed out without a result."""
        self.given_at = 0.0
        self.began: float | None = None
        """When the job in hand started: handed over to a ready slot (its time limit runs)."""
        self.log_start = 0

    def start(self) -> None:
        env = child_environment(self.place.device)
        env.update(self.threads)
        if self.place.visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.place.visible
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                # its own process group: a Ctrl-C at the terminal reaches the run, which
                # stops the slots itself, not the slots mid-write; and a slot past its time
                # limit is killed with everything it started
                start_new_session=True,
                env=env,
            )
        self.ready = False
        threading.Thread(
            target=_forward,
            args=(self, self.process, self.answers),
            name="kernelaudit-slot-reader",
            daemon=True,
        ).start()

    def now_ready(self) -> None:
        self.ready = True
        if self.job is not None:
            self.began = time.perf_counter()

    def give(self, pending: deque[tuple[str, Job]]) -> None:
        if self.job is not None or not pending or self.process is None:
            return
        self.job = pending.popleft()
        key, job = self.job
        self.log_start = self.log.stat().st_size
        self.tries = self.departures.depart(
            Flight(key, self.place.label, str(self.log), self.log_start)
        )
        self.given_at = time.perf_counter()
        self.began = self.given_at if self.ready else None
        assert self.process.stdin is not None
        message = job_message(key, job)
        # a slot that died already is noticed by its reader, which sends its last words
        with contextlib.suppress(BrokenPipeError, OSError):
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()

    def answered(self, answer: dict[str, Any]) -> JobResult:
        assert self.job is not None
        key, job = self.job
        if answer["key"] != key:
            raise RuntimeError(f"slot {self.place.label} answered job {answer['key']}, not {key}")
        self.job = None
        return result_of(key, job, answer, self.place.label)

    def overdue(self, job_timeout: float) -> bool:
        return (
            self.job is not None
            and self.began is not None
            and time.perf_counter() - self.began >= job_timeout
        )

    def timed_out(self, job_timeout: float) -> JobResult:
        """Kill the slot with everything it started; its job, as a timeout."""
        assert self.process is not None and self.job is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.reap()
        key, job = self.job
        self.job = None
        error = f"no result within --job-timeout {job_timeout:g} s; its audit process was killed"
        return self._failure(key, job, error, "timeout")

    def died(self, tries: int) -> JobResult:
        """The job in flight when the slot process ended, as a crash (the `tries`-th)."""
        assert self.process is not None and self.job is not None
        code = self.process.wait()
        if not self.ready:
            raise UsageError(
                f"the audit process for {self.place.label} ended ({_exit(code)}) before it "
                f"could audit; its log {self.log} ends with:\n{self._tail()}"
            )
        key, job = self.job
        self.job = None
        error = f"the audit process died ({_exit(code)}) on the job's try {tries} of {MAX_TRIES}"
        return self._failure(key, job, error, "crash")

    def _failure(self, key: str, job: Job, error: str, status: str) -> JobResult:
        tail = self._tail()
        return JobResult(
            key,
            job,
            None,
            f"{error}; its log ends with:\n{tail}" if tail else error,
            self.place.label,
            time.perf_counter() - self.given_at,
            status,
        )

    def _tail(self) -> str:
        return Flight("", self.place.label, str(self.log), self.log_start).log_tail()

    def reap(self) -> None:
        assert self.process is not None
        self.process.wait()
        self.process = None

    def stop(self) -> None:
        """End the slot: an idle one on its closed stdin, a busy one (an interrupted run) at
        once."""
        process = self.process
        if process is None:
            return
        with contextlib.suppress(OSError):
            assert process.stdin is not None
            process.stdin.close()
        if self.job is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=_STOP_GRACE_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        self.process = None


def _forward(slot: _Slot, process: subprocess.Popen[str], answers: _Answers) -> None:
    """Pass each line a slot writes on to the run, then None when the slot is gone."""
    stream: IO[str] | None = process.stdout
    assert stream is not None
    for line in stream:
        # a line cut short is the slot dying in the middle of an answer: its end says so
        if line.endswith("\n"):
            answers.put((slot, process, line))
    answers.put((slot, process, None))


def _exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"
