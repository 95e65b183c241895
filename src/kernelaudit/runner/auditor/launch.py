"""Starting the processes that run a candidate: their environment (`child_environment`), and
one launcher for every child (`start_confined`, through `start_python` for a Python child,
`run_python` for a one-shot child waited for, or `finish_python` for one started earlier): in
the candidate's sandbox, in a session of its own, and ended with everything it started once
done or out of time (`end_group`, `wait_then_end`)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import kernelaudit
from kernelaudit.runner.auditor.limits import (
    FolderBound,
    Waited,
    exited_within,
    passed_bound,
    wait_within,
)
from kernelaudit.runner.auditor.sandbox import cache_bound, for_candidate, isolation, job_bound
from kernelaudit.runner.auditor.threads import THREADS_VARIABLE, thread_environment, thread_share


def child_environment(device: str, gpus: int | None = None) -> dict[str, str]:
    """The environment of a process that runs a candidate: able to import kernelaudit, its
    thread pools held to the audit's share of the cores, and with Triton interpreting kernels
    on a CPU. Nothing in it names the auditor. `gpus`: as `threads.thread_share` takes it."""
    env = dict(os.environ)
    env.update(thread_environment(thread_share(device, gpus=gpus)))
    # the share of an audit's cores is the auditor's setting; the standard variables hold
    # the candidate's pools, and no variable of kernelaudit's own is left to be seen
    env.pop(THREADS_VARIABLE, None)
    # A source checkout the auditor was imported from must be importable by the child too;
    # an installed package already is, and site-packages must not move ahead of the stdlib.
    root = str(Path(kernelaudit.__file__).resolve().parent.parent)
    installed = {*site.getsitepackages(), site.getusersitepackages()}
    if root not in installed:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    if device.partition(":")[0] == "cpu":
        # Triton kernels run through Triton's interpreter on the CPU.
        env["TRITON_INTERPRET"] = "1"
    return env


@dataclass(frozen=True)
class ChildExit:
    """How a one-shot child (`run_python`) ended."""

    timed_out: bool
    returncode: int | None
    stderr_tail: str
    """Its last three lines of standard error, joined by " / " ("" when silent)."""
    over_memory: str = ""
    """Why it was killed for the host memory its processes held ("" when it was not)."""
    over_disk: str = ""
    """Why it was killed for what it wrote to its cache or job folder ("" when it was not)."""

    def failure(self, written: bool, timeout_s: float, whose: str) -> tuple[str, str]:
        """Why there is no result to read, as a stopped run's kind ("timeout", "host-memory",
        "disk", "crash") and words naming `whose` process ("its", "the candidate's"); ("",
        "") when the child ended and `written` its result."""
        if self.timed_out:
            return "timeout", f"no result from {whose} process within {timeout_s:.0f} s"
        kind, why = passed_bound(self.over_memory, self.over_disk)
        if kind:
            return kind, why
        if not written:
            tail = self.stderr_tail or "no message"
            return "crash", f"{whose} process died (exit {self.returncode}): {tail}"
        return "", ""


def start_confined(
    command: Sequence[str],
    environment: Mapping[str, str],
    candidate: str | Path,
    scratch: str | Path | None,
    readable: Sequence[str | Path] = (),
    stdout: int | IO[bytes] = subprocess.DEVNULL,
    stderr: int | IO[bytes] = subprocess.PIPE,
    cwd: str | Path | None = None,
    pass_fds: Sequence[int] = (),
    stdin: int = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    """Start `command`, which runs `candidate`, without waiting for it: in a session of its
    own, with exactly `environment`, and in its sandbox (`runner.auditor.sandbox`: writing
    only `scratch`, when given, and reading `readable` besides the candidate's folder),
    keeping open the file descriptors `pass_fds`. `stdin`: nothing (the default), or
    `subprocess.PIPE` for a child that waits to be told to go on. The one place a process
    that runs a candidate is started; whoever starts it ends it (`end_group`)."""
    confined, env = for_candidate(
        list(command), dict(environment), candidate, scratch=scratch, readable=readable
    )
    return subprocess.Popen(
        confined,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
        env=env,
        cwd=cwd,
        pass_fds=tuple(pass_fds),
    )


def start_python(
    arguments: list[str],
    device: str,
    candidate: str | Path,
    scratch: str | Path | None,
    readable: Sequence[str | Path] = (),
    environment: Mapping[str, str] | None = None,
    stdout: int | IO[bytes] = subprocess.DEVNULL,
    stderr: int | IO[bytes] = subprocess.PIPE,
    cwd: str | Path | None = None,
    pass_fds: Sequence[int] = (),
    gpus: int | None = None,
    stdin: int = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    """Start `python *arguments` as `start_confined` starts a command, with a candidate's
    environment (`child_environment`, and `environment` over it). `gpus`: as
    `child_environment` takes it."""
    return start_confined(
        [sys.executable, *arguments],
        {**child_environment(device, gpus), **(environment or {})},
        candidate,
        scratch,
        readable,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        pass_fds=pass_fds,
        stdin=stdin,
    )


def end_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the child's whole process group, whatever is left of it, and reap the child: a
    candidate that leaves processes behind takes them with it, even once the child itself
    has ended (its end is read without reaping it, `limits.exited`, so its group's id is
    still its own). A child reaped already is not signalled again: its pid may be another
    process's by now."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def wait_then_end(
    process: subprocess.Popen[bytes],
    deadline: float,
    host_memory_bytes: int = 0,
    stop: threading.Event | None = None,
    folders: Sequence[FolderBound | None] = (),
) -> Waited:
    """Wait for a child as `limits.wait_within` does (until it ends, `deadline` on the
    monotonic clock passes, `stop` is set, or it passes its host memory's bound or one of
    `folders`'), then end it with its group (`end_group`); the folder it wrote past its bound
    is emptied where that bound says so (`FolderBound.emptied`)."""
    try:
        waited = wait_within(process, deadline, host_memory_bytes, stop, folders)
    finally:
        end_group(process)
    if waited.full is not None and waited.full.emptied:
        waited.full.empty()
    return waited


@dataclass(frozen=True)
class Piped:
    """A child started by `start_piped`, and the auditor's ends of its two pipes."""

    process: subprocess.Popen[bytes]
    to_child: int
    """Written by the auditor, not blocking (a child that stops reading cannot hang it)."""
    from_child: int
    regions: tuple[int, ...] = ()
    """Memory files the child maps too (`runner.boundary.memory_file`), the auditor's to close: the
    worker's arguments and results, where the platform has them."""
    lending: int = -1
    """The auditor's end of a socket the worker is handed device memory through
    (`runner.boundary.lent`), the auditor's to close; -1: none."""


_TAIL_BYTES = 4000
"""How much of the end of a one-shot child's output is read for its last lines."""


def file_tail(output: IO[bytes], most_bytes: int = _TAIL_BYTES) -> str:
    """The last `most_bytes` of what a child wrote to the file `output`, as text."""
    size = output.seek(0, os.SEEK_END)
    output.seek(max(0, size - most_bytes))
    return output.read().decode(errors="replace")


def written_since(log: IO[bytes], since: int, most_bytes: int = _TAIL_BYTES) -> str:
    """The end of what a child wrote to the file `log` since byte `since` (at most
    `most_bytes` of it), for a message: "" when it wrote nothing but blanks."""
    end = os.fstat(log.fileno()).st_size
    start = max(since, end - most_bytes)
    # pread leaves the shared file offset alone, so the child's writes land where they should.
    text = os.pread(log.fileno(), end - start, start).decode(errors="replace")
    if not text.strip():
        return ""
    cut = "...\n" if start > since else ""
    return f"\nlast output on stderr:\n{cut}{text.rstrip()}"


def exit_description(process: subprocess.Popen[bytes], grace_s: float) -> str:
    """How a long-lived child ended, in words (waiting `grace_s` for it to end at all; it
    is left for `end_group` to reap)."""
    code = exited_within(process, grace_s)
    if code is None:
        return "closed its channel but is still running"
    if code > 128 and isolation().confined:
        code = 128 - code  # bubblewrap exits 128 + n for a child killed by signal n
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"was killed by signal {-code}"
    return f"was killed by signal {name} ({signal.strsignal(-code)})"


PIPE_BYTES = 1 << 20
"""The pipes' buffer, where Linux allows it: large tensors move in fewer steps."""


def start_piped(
    module: str,
    arguments: list[str],
    device: str,
    candidate: str | Path,
    log: IO[bytes],
    gpus: int | None = None,
    keep_fds: Sequence[int] = (),
) -> Piped:
    """Start `python -m module READ_FD WRITE_FD *arguments` as `start_python` does, talking to
    the auditor over two private pipes (their numbers come first in its arguments), its
    output and errors to `log`: how every long-lived child that runs a candidate starts (the
    worker, the training check's slot). `keep_fds`: more descriptors it keeps open (shared
    memory, `runner.boundary.shared`)."""
    child_reads, parent_writes = os.pipe()
    parent_reads, child_writes = os.pipe()
    for fd in (parent_writes, parent_reads):
        _widen(fd)
    try:
        process = start_python(
            ["-m", module, str(child_reads), str(child_writes), *arguments],
            device,
            candidate,
            None,
            stdout=log,
            stderr=log,
            pass_fds=(child_reads, child_writes, *keep_fds),
            gpus=gpus,
        )
    except BaseException:
        os.close(parent_writes)
        os.close(parent_reads)
        raise
    finally:
        os.close(child_reads)
        os.close(child_writes)
    os.set_blocking(parent_writes, False)
    return Piped(process, parent_writes, parent_reads)


def _widen(fd: int) -> None:
    setpipe = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setpipe is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, setpipe, PIPE_BYTES)


def run_python(
    arguments: list[str],
    device: str,
    timeout_s: float,
    candidate: str | Path,
    scratch: str | Path,
    readable: Sequence[str | Path] = (),
    host_memory_bytes: int = 0,
    result_bytes: int = 0,
) -> ChildExit:
    """Run `python *arguments`, which runs `candidate`, as `start_python` starts it, in
    `scratch` as its working folder, and wait for it as `finish_python` does (`scratch` held
    to what is in it now and `result_bytes` more: `sandbox.job_bound`; past that the child is
    killed, and the folder left for its owner to remove)."""
    bound = job_bound(scratch, result_bytes)
    with tempfile.TemporaryFile() as stderr:
        process = start_python(
            arguments, device, candidate, scratch, readable, stderr=stderr, cwd=scratch
        )
        return finish_python(process, stderr, timeout_s, candidate, host_memory_bytes, bound)


def finish_python(
    process: subprocess.Popen[bytes],
    stderr: IO[bytes],
    timeout_s: float,
    candidate: str | Path,
    host_memory_bytes: int = 0,
    job: FolderBound | None = None,
) -> ChildExit:
    """Wait for a child `start_python` started (its standard error going to the file
    `stderr`) and end it with its group (`wait_then_end`) once it is done, past `timeout_s`
    from now, or once its processes hold more than `host_memory_bytes` of host memory, or
    write past its cache folder's bound or its job folder's (`job`, `sandbox.job_bound`)."""
    folders = (cache_bound(candidate), job)
    waited = wait_then_end(process, time.monotonic() + timeout_s, host_memory_bytes, None, folders)
    if waited.returncode is None:
        return ChildExit(
            waited.timed_out,
            None,
            "",
            over_memory=waited.over_memory,
            over_disk=waited.over_disk,
        )
    tail = file_tail(stderr).strip().splitlines()[-3:]
    return ChildExit(False, waited.returncode, " / ".join(tail))
