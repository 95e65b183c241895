"""Starting `kernelaudit check`'s first worker before the auditor has imported torch.

A short audit's longest wait is its worker's start: the sandbox, Python, torch, the device and
the candidate's import, a few seconds that the auditor could only overlap with its own
planning. The auditor itself spends its first seconds importing torch and reading the problem.
So the command line starts the worker of its first candidate at once, from what its arguments
alone say (the candidate's file and the device), and the audit takes that process over when it
starts a worker for the same file with the same environment (`take`). Anything else (another
file, another environment, a candidate format this cannot read ahead) and the early process is
killed and a worker started as usual: starting early changes when the worker starts, never
what it runs. What to load comes in the worker's first message (`messages.Load`), as it does
for any worker.

Before that worker starts, the command's problem and candidate files are read and hashed
(`files_as_read`): a candidate that rewrites its own file (or the problem's) once it runs
cannot make the audit read other bytes than the ones the command was given unnoticed.

This module and what it imports leave torch unimported.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from kernelaudit.corpus.jobs import Job, as_read
from kernelaudit.errors import UsageError
from kernelaudit.runner.auditor.launch import (
    Piped,
    child_environment,
    end_group,
    start_piped,
)
from kernelaudit.runner.auditor.threads import visible_gpus
from kernelaudit.runner.boundary.memory_file import memory_file

WORKER = "kernelaudit.runner.worker.main"

VALUE_OPTIONS = (
    "--profile",
    "--device",
    "--budget",
    "--json",
    "--html",
    "--checks",
    "--assume",
    "--case",
    "--trace",
    "--junit",
    "--sarif",
)
"""The options of `kernelaudit check` that take a value (a test holds this to the real parser)."""


@dataclass(frozen=True)
class Early:
    """A worker started before the audit asked for one."""

    candidate: str
    """The resolved path of the file it will import."""
    environment: tuple[tuple[str, str], ...]
    child: Piped
    log: IO[bytes]


_early: Early | None = None
_read: tuple[Job, ...] = ()
"""The command's (problem, candidate) files as read before its first worker started."""


def files_as_read(problem: str, candidates: list[str]) -> tuple[Job, ...]:
    """A job per candidate with the sha256 of its files as this process first read them: before
    the early worker started, for the command line `start_for` was given; now, otherwise (no
    candidate has run in this process yet). The early reading serves one command."""
    global _read
    early, _read = _read, ()
    wanted = tuple(Job(problem, candidate) for candidate in candidates)
    if wanted == early:  # jobs compare by their paths alone
        return early
    return tuple(as_read(job) for job in wanted)


def start_for(arguments: list[str]) -> None:
    """Start the worker of the first candidate `arguments` (a `kernelaudit` command line)
    name, when they are a `check` of a candidate whose file can be known ahead."""
    global _early, _read
    if _early is not None or not arguments or arguments[0] != "check":
        return
    parsed = _parse(arguments[1:])
    if parsed is None:
        return
    problem, candidates, device = parsed
    _read = tuple(as_read(Job(problem, candidate)) for candidate in candidates)
    path = _candidate_file(candidates[0])
    if path is None:
        return
    if device == "auto":
        device = "cuda" if visible_gpus() else "cpu"
    elif not (device == "cpu" or device.partition(":")[0] == "cuda"):
        return  # the audit will refuse it
    gpus = visible_gpus()
    log = tempfile.TemporaryFile()  # noqa: SIM115 (handed over with the process)
    try:
        child = start_worker(path, device, log, gpus)
    except OSError:
        log.close()
        return
    environment = tuple(sorted(child_environment(device, gpus).items()))
    _early = Early(str(path), environment, child, log)


def start_worker(
    candidate: str | Path, device: str, log: IO[bytes], gpus: int | None = None
) -> Piped:
    """Start a worker for the file `candidate` (`python -m kernelaudit.runner.worker.main READ_FD
    WRITE_FD FILE ARGUMENTS_FD RESULTS_FD LENDING_FD`), its output to `log`; what to call and
    where comes in its first message. ARGUMENTS_FD and RESULTS_FD are the memory files the
    calls' large tensors cross in (`runner.boundary.memory_file`; "-" where there are none), one
    each way; LENDING_FD is the worker's end of the socket device memory is lent through
    (`runner.boundary.lent`)."""
    regions = [memory_file("arguments"), memory_file("results")]
    if min(regions) < 0:
        for fd in regions:
            if fd >= 0:
                os.close(fd)
        regions = []
    named = [str(fd) for fd in regions] or ["-", "-"]
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        child = start_piped(
            WORKER,
            [str(Path(candidate).resolve()), *named, str(theirs.fileno())],
            device,
            candidate,
            log,
            gpus,
            keep_fds=[*regions, theirs.fileno()],
        )
    except BaseException:
        for fd in regions:
            os.close(fd)
        ours.close()
        raise
    finally:
        theirs.close()
    # never waited on: a worker that stops taking what it is lent is lent nothing more
    ours.setblocking(False)
    return replace(child, regions=tuple(regions), lending=ours.detach())


def worker_for(candidate: str | Path, device: str) -> tuple[Piped, IO[bytes]]:
    """A worker for the file `candidate` on `device`, and the file its output goes to: the one
    started early when it is the very one this would start (`take`), else a new one."""
    early = take(candidate, device)
    if early is not None:
        return early
    # held open for the child's whole life: crash messages quote its end
    log = tempfile.TemporaryFile()  # noqa: SIM115
    return start_worker(candidate, device, log), log


def take(candidate: str | Path, device: str) -> tuple[Piped, IO[bytes]] | None:
    """The early worker, when it was started for `candidate` with the environment a worker on
    `device` gets now; otherwise None, and the early worker is ended."""
    global _early
    early, _early = _early, None
    if early is None:
        return None
    environment = tuple(sorted(child_environment(device).items()))
    if early.candidate == str(Path(candidate).resolve()) and early.environment == environment:
        return early.child, early.log
    _end(early)
    return None


def discard() -> None:
    """End the early worker if no audit took it, and forget the files read for it."""
    global _early, _read
    early, _early, _read = _early, None, ()
    if early is not None:
        _end(early)


def _end(early: Early) -> None:
    child = early.child
    for fd in (child.to_child, child.from_child, *child.regions, child.lending):
        with contextlib.suppress(OSError):
            os.close(fd)
    end_group(early.child.process)
    early.log.close()


def _parse(arguments: list[str]) -> tuple[str, list[str], str] | None:
    """The problem, the candidates and the device a `check` command line names, or None."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("problem")
    parser.add_argument("candidates", nargs="+")
    for option in VALUE_OPTIONS:
        parser.add_argument(option)
    try:
        known, _ = parser.parse_known_args(arguments)
    except SystemExit:  # the real parser will say what is wrong
        return None
    return known.problem, known.candidates, known.device or "auto"


def _candidate_file(spec: str) -> Path | None:
    """The file a candidate's worker will import, where it can be known without torch: a
    `file.py::function`, or a SOL-ExecBench solution's entry (its sources written out)."""
    if "::" in spec:
        file = Path(spec.rsplit("::", 1)[0])
        return file.resolve() if file.is_file() else None
    path = Path(spec)
    if path.suffix != ".json":
        return None  # a KernelBench file runs through a shim made from the problem
    from kernelaudit.formats.solexecbench.solution import (  # it reads no torch
        is_solution,
        unpack_solution,
    )

    if not is_solution(path):
        return None
    try:
        return unpack_solution(path).entry
    except (UsageError, OSError):
        return None  # the audit will say what is wrong
