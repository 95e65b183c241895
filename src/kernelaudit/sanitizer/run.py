"""Starting the child, plain or under one compute-sanitizer tool, with a time limit.

Each run is a process group of its own, killed whole when it outlives its limit. The sanitizer
writes its reports to a log file of their own (`--log-file`), so nothing the candidate prints
can pass for a report.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelaudit.runner.auditor.launch import (
    child_environment,
    file_tail,
    start_confined,
    wait_then_end,
)
from kernelaudit.runner.auditor.limits import FolderBound
from kernelaudit.runner.auditor.results import Refused, read_bounded

PADDING_BYTES = 1 << 16
"""memcheck's `--padding`: an unused gap after every allocation, so an overrun lands in no
other buffer (where it would go unseen) however far past the end it goes, up to 64 KiB."""

PRINT_LIMIT = 64
"""Reports printed per run; the summary line still counts them all."""

LOG_BYTES = 16 << 20
"""The most a tool's log may hold to be read: `PRINT_LIMIT` reports and a summary take tens of
kilobytes. The log lies in a folder the candidate's processes write."""

ERROR_EXITCODE = 86
"""The exit code the sanitizer returns when it found errors (the child itself exits 0)."""


@dataclass(frozen=True)
class Run:
    """One finished (or killed) run.

    tool: the sanitizer tool, or "plain" for the run without one.
    returncode: None when the run was killed (at its time limit, or for memory).
    log: what the sanitizer wrote to its log ("" for a plain run, or when it wrote nothing).
    output: the end of what the processes wrote to stdout and stderr (the sanitizer's own
        failures, the candidate's prints, a traceback).
    over_memory: why it was killed for the host memory its processes held ("" if it was not).
    over_disk: why it was killed for what it wrote to the candidate's cache folder or its job
        folder ("" if it was not): the candidate fails for it.
    refused: why its log was not read ("" when it was, or there was none): not a regular file
        (a link the candidate's processes planted where the tool writes), or larger than
        `LOG_BYTES`.
    """

    tool: str
    command: tuple[str, ...]
    seconds: float
    returncode: int | None
    log: str
    output: str
    over_memory: str = ""
    over_disk: str = ""
    refused: str = ""

    @property
    def timed_out(self) -> bool:
        return self.returncode is None and not self.over_memory and not self.over_disk


def child_command(request: Path, result: Path) -> list[str]:
    return [sys.executable, "-m", "kernelaudit.sanitizer.child", str(request), str(result)]


def sanitizer_command(
    executable: str,
    tool: str,
    log: Path,
    limit_s: float,
    kernels: Sequence[str],
    child: Sequence[str],
) -> list[str]:
    """The command line that runs `child` under `tool`, checking only the kernels whose
    mangled names contain one of `kernels` (every kernel when there are none)."""
    command = [
        executable,
        "--tool",
        tool,
        "--log-file",
        str(log),
        "--print-limit",
        str(PRINT_LIMIT),
        "--error-exitcode",
        str(ERROR_EXITCODE),
        # how long the tool waits for the child to connect (at its first CUDA call, after
        # importing torch): as long as the run may take
        "--launch-timeout",
        str(max(1, int(limit_s))),
        "--target-processes",
        "application-only",
        # a kernel that faults is stopped, not the whole context: the next case still runs
        "--destroy-on-device-error",
        "kernel",
        "--show-backtrace",
        "no",
    ]
    if tool == "memcheck":
        command += ["--padding", str(PADDING_BYTES), "--report-api-errors", "no"]
    for name in kernels:
        command += ["--kernel-name", f"kns={name}"]
    return [*command, "--", *child]


def environment(device: str) -> dict[str, str]:
    """The child's environment: a candidate's, with torch's caching allocator off (it rounds
    allocations up and carves tensors out of larger blocks, so an overrun of a few elements
    lands inside memory the sanitizer counts as allocated) and CUDA modules loaded lazily (the
    sanitizer instruments every module loaded, and torch's are many)."""
    env = child_environment(device)
    env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    # expandable segments map memory through the virtual memory API, which --padding does
    # not pad and where the sanitizer has reported overruns that were not there
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        env.pop(name, None)
    env["CUDA_MODULE_LOADING"] = "LAZY"
    return env


def run(
    tool: str,
    command: Sequence[str],
    env: dict[str, str],
    limit_s: float,
    log: Path,
    candidate: str | Path,
    scratch: Path,
    readable: Sequence[str | Path] = (),
    stop: threading.Event | None = None,
    host_memory_bytes: int = 0,
    folders: Sequence[FolderBound | None] = (),
) -> Run:
    """Run `command`, which runs `candidate`, as every candidate's process starts
    (`launch.start_confined`: in its sandbox, writing only `scratch`, reading `readable`
    besides the candidate's folder) for at most `limit_s` seconds, until `stop` is set (the
    audit it belongs to ended without it), until its processes hold more than
    `host_memory_bytes` of host memory (0: half of the machine's), or until they write more to
    the candidate's cache folder or its job folder than `folders` let them hold (the folder is
    then emptied); whatever it started ends with it."""
    with tempfile.TemporaryFile() as output:
        began = time.perf_counter()
        process = start_confined(
            command,
            env,
            candidate,
            scratch,
            readable,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + max(limit_s, 1.0)
        waited = wait_then_end(process, deadline, host_memory_bytes, stop, folders)
        seconds = time.perf_counter() - began
        tail = file_tail(output)
    text, refused = "", ""
    try:
        read = read_bounded(log, LOG_BYTES, f"{PRINT_LIMIT} reports", "its log")
        text = read.decode(errors="replace")
    except FileNotFoundError:
        pass
    except Refused as error:
        refused = error.why
    return Run(
        tool,
        tuple(command),
        seconds,
        waited.returncode,
        text,
        tail,
        waited.over_memory,
        waited.over_disk,
        refused,
    )
