"""The trusted side of the worker: starting it, talking to it, and surviving it.

The candidate runs in a child Python process (`kernelaudit.runner.worker.main`) in a session and
process group of its own, so a hang is ended by killing the whole group and a crash takes
only the child down. The two sides exchange messages over two private pipes in the format of
`kernelaudit.runner.boundary.wire`, every read and write held to a deadline
(`runner.auditor.channel`); large tensors cross in two memory regions both map
(`runner.boundary.shared`), the invocation's in one and the reply's in the other. The auditor sizes
both before each invocation, the reply's to what the calls' declared inputs and outputs can fill,
and reads the reply's tensors only inside the size it chose. The calls' buffers are laid out in an
arena (`runner.boundary.arena`) that the auditor reads itself after the reply
(`runner.auditor.observed`): on a CPU in the invocation's region, on a GPU in device memory the
auditor lends the worker (`runner.boundary.lent`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import IO

import torch

from kernelaudit.errors import UsageError
from kernelaudit.runner.auditor import prestart
from kernelaudit.runner.auditor.channel import Channel, Died, OverLimit, Timeout
from kernelaudit.runner.auditor.launch import end_group, exit_description, written_since
from kernelaudit.runner.auditor.limits import (
    MEMORY_POLL_S,
    FolderBound,
    Limits,
    over_memory,
    region_most_bytes,
    resident_bytes,
    until_exit,
)
from kernelaudit.runner.auditor.observed import observe
from kernelaudit.runner.auditor.sandbox import cache_bound
from kernelaudit.runner.boundary.arena import set_aside
from kernelaudit.runner.boundary.guard import draw_canary
from kernelaudit.runner.boundary.lent import Lender
from kernelaudit.runner.boundary.messages import (
    REPEAT_ASKED,
    REPEAT_TOLD,
    Invocation,
    InvocationResult,
    Load,
    TensorArg,
    withheld,
)
from kernelaudit.runner.boundary.shared import Region, room
from kernelaudit.runner.boundary.wire import REGION_LEAST_BYTES, TooLarge
from kernelaudit.runner.candidate import CandidateRef

_CLOSE_GRACE_S = 2.0
_LOAD_REPLY_BYTES = 1 << 20
"""The most a worker's answer to loading the candidate may take: "ready", or why it failed."""


class Worker:
    """A child process that has loaded one candidate and runs invocations of it.

    `run` never raises for anything the candidate does: failures come back as an
    `InvocationResult` with `error_kind` set. After a timeout, a crash or a CUDA error the
    child is gone, and the next `run` starts a new one.

    `limits` holds every limit; without it, `timeout_s` and `load_timeout_s` are the only ones.
    """

    def __init__(
        self,
        candidate: CandidateRef,
        device: str,
        timeout_s: float = 120.0,
        load_timeout_s: float = 600.0,
        limits: Limits | None = None,
    ) -> None:
        self.candidate = candidate
        self.device = device
        self.limits = limits or Limits(timeout_s=timeout_s, load_timeout_s=load_timeout_s)
        self.timeout_s = self.limits.timeout_s
        self.load_timeout_s = self.limits.load_timeout_s
        self._device_baseline = 0
        self._next_memory_poll = 0.0
        self._proc: subprocess.Popen[bytes] | None = None
        self._namespaces: set[str] = set()
        """The process-id namespaces the worker's processes were seen in (`resident_bytes`)."""
        self._cache: FolderBound | None = None
        """What the candidate's cache folder may hold, under the sandbox (`sandbox.cache_bound`)."""
        self._channel: Channel | None = None
        self._stderr: IO[bytes] | None = None
        self._load_failure: InvocationResult | None = None
        self._ready = False
        self._arguments: Region | None = None
        self._results: Region | None = None
        self._canary = b""
        """The canary pattern drawn for the worker now running (`runner.auditor.observed` reads
        it)."""
        self._lender: Lender | None = None
        """What lends device memory to the worker now running, for its arenas (on a GPU)."""

    def __enter__(self) -> Worker:
        self.launch()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def launch(self) -> None:
        """Start the child without waiting for it: it imports torch and the candidate while
        the auditor prepares its first cases. `start` (or the first `run`) waits for it."""
        if self._proc is not None or self._load_failure is not None:
            return
        if not Path(self.candidate.path).is_file():
            raise UsageError(
                f"candidate {self.candidate.label}: there is no file {self.candidate.path}; "
                "check the path."
            )
        self._spawn()
        self._ready = False

    def start(self) -> None:
        """Start the child and wait until it has imported the candidate.

        Raises UsageError when the file or the function is missing. A candidate whose import
        fails (a syntax error, an exception, a crash, a hang) does not raise here: every run
        then returns that failure.
        """
        self.launch()
        if self._proc is None or self._ready:
            return
        try:
            reply = self._receive(time.monotonic() + self.load_timeout_s, _LOAD_REPLY_BYTES)
        except Timeout:
            kind = "timeout"
            text = (
                f"loading {self.candidate.label} took longer than {self.load_timeout_s:g} s; "
                "the worker was stopped."
            )
        except Died:
            kind = "crash"
            text = f"the worker {self._exit_description()} while importing {self.candidate.label}."
        except OverLimit as over:
            kind = over.kind
            text = f"while importing {self.candidate.label}, {over}"
        else:
            if reply == ("ready",):
                self._ready = True
                self._device_baseline = self._device_used()
                return
            kind = "exception"
            if isinstance(reply, tuple) and len(reply) == 2 and reply[0] == "usage":
                self._kill()
                raise UsageError(str(reply[1]))
            if isinstance(reply, tuple) and len(reply) == 2 and reply[0] == "exception":
                text = f"importing {self.candidate.label} raised an exception:\n{reply[1]}"
            elif isinstance(reply, TooLarge):
                text = (
                    f"while importing {self.candidate.label}, {reply} (the answer to loading "
                    "is a few words); the candidate wrote to the worker's channel, and the "
                    "reply was refused unread"
                )
            else:
                text = f"the worker sent {type(reply).__name__} instead of saying it was ready"
        text += self._stderr_tail(0) if kind != "exception" else ""
        self._load_failure = InvocationResult(calls=(), error=text, error_kind=kind)
        self._kill_for(kind)

    def run(self, invocation: Invocation, reply_bytes: int | None = None) -> InvocationResult:
        """Run every call of `invocation` in the child and return what it observed. A reply
        announcing more than `reply_bytes` (the most that the calls' declared inputs and
        outputs can fill, `reply_limit`) is refused unread and the worker killed."""
        if self._load_failure is None and not self._ready:
            self.start()
        if self._load_failure is not None:
            return self._load_failure
        limit = self.timeout_s * max(1, len(invocation.calls))
        began = time.monotonic()
        mark = self._stderr_size()
        try:
            bound = reply_bytes or self.limits.host_memory_bytes or None
            invocation = self._size_regions(invocation, bound)
            told, answers = withheld(invocation)
            sent = time.perf_counter()
            self._send(told, began + limit, self._arguments)
            reply = self._receive(began + limit, bound, self._results)
            while isinstance(reply, tuple) and reply[:1] == (REPEAT_ASKED,):
                # a question asked twice, or of a call without repetitions, is garbage
                index = reply[1] if len(reply) == 2 else None
                answer = answers.pop(index, None) if type(index) is int else None
                if answer is None:
                    reply = ValueError(f"{reply!r} asked of calls {sorted(answers)}")
                    break
                self._send((REPEAT_TOLD, answer), began + limit)
                reply = self._receive(began + limit, bound, self._results)
            self.round_trip_s = time.perf_counter() - sent
        except Timeout:
            text = (
                f"the candidate was still running after {time.monotonic() - began:.1f} s "
                f"(limit: {len(invocation.calls)} call(s) x {self.timeout_s:g} s); "
                "the worker was killed." + self._stderr_tail(mark)
            )
            self._kill()
            return InvocationResult(calls=(), error=text, error_kind="timeout")
        except Died:
            text = f"the worker process {self._exit_description()} while running the candidate."
            text += self._stderr_tail(mark)
            self._kill()
            return InvocationResult(calls=(), error=text, error_kind="crash")
        except OverLimit as over:
            self._kill_for(over.kind)
            return InvocationResult(calls=(), error=str(over), error_kind=over.kind)
        if isinstance(reply, TooLarge):
            self._kill()
            return InvocationResult(
                calls=(),
                error=f"{reply} (the most its calls' declared inputs and outputs can fill); the "
                "candidate wrote to the worker's channel or returned far more than its outputs, "
                "and the reply was refused unread and the worker killed.",
                error_kind="crash",
            )
        if not isinstance(reply, InvocationResult):
            self._kill()
            what = (
                f"a reply that is not a message ({reply})"
                if isinstance(reply, Exception)
                else f"{type(reply).__name__} instead of a result"
            )
            return InvocationResult(
                calls=(),
                error=f"the worker sent {what}; the candidate may have written to the worker's "
                "channel or forged its reply, and the worker was killed.",
                error_kind="crash",
            )
        lent = self._lender.block if invocation.lent and self._lender is not None else None
        reply = observe(invocation, reply, lent or self._arguments, self._canary)
        if reply.error_kind in ("cuda", "crash", "memory", "tampered"):
            # The child exits after these, or cannot be trusted: make sure, start anew next run.
            self._kill()
            return reply
        held = self._device_used() - self._device_baseline
        if self._lender is not None:
            self._lender.done()
        if self.limits.gpu_memory_bytes and held > self.limits.gpu_memory_bytes:
            self._kill()
            return replace(
                reply,
                error=f"the worker held {held / 2**30:.2f} GiB of device memory after the call, "
                f"more than its limit of {self.limits.gpu_memory_bytes / 2**30:.2f} GiB; the "
                "worker was killed.",
                error_kind="memory",
            )
        return reply

    round_trip_s: float = 0.0
    """Seconds from sending the last invocation to reading the worker's reply, on the
    auditor's clock: the worker's whole answer, none of the auditor's own work around it
    (sizing the regions, reading the arena)."""

    close_grace_s: float = 0.0
    """How long `close` lets the child end by itself before killing it. Nothing the audit
    needs comes from a child that ends by itself (a GPU process spends about a second tearing
    CUDA down), so an audit kills it at once; a profiler of the child's own gives it time."""

    def close(self) -> None:
        """Stop the child (and anything it started)."""
        if self._proc is None:
            return
        self._close_fds(only_to_child=True)
        if self.close_grace_s > 0:
            until_exit(self._proc, self.close_grace_s)  # left for `_kill` to reap
        self._kill()

    # --- the child's life ---

    def _spawn(self) -> None:
        child, self._stderr = prestart.worker_for(self.candidate.path, self.device)
        self._cache = cache_bound(self.candidate.path)
        self._proc = child.process
        self._namespaces = set()
        self._channel = Channel(child.process, child.to_child, child.from_child, self._watch_limits)
        if child.regions:
            self._arguments, self._results = (Region(fd) for fd in child.regions)
        if child.lending >= 0:
            channel = socket.socket(fileno=child.lending)
            if torch.device(self.device).type == "cuda":
                self._lender = Lender(channel, torch.device(self.device))
            else:
                channel.close()
        self._canary = draw_canary()
        load = Load(
            self.device,
            self.limits.gpu_memory_bytes,
            self.candidate.function,
            self.candidate.autograd_argument(),
            self._canary,
        )
        # a few hundred bytes into an empty pipe; a child already gone is seen when the
        # worker's answer to loading is awaited
        with contextlib.suppress(Died, Timeout, OverLimit):
            self._send(load, time.monotonic() + self.load_timeout_s)

    def _kill(self) -> None:
        """Kill the child's whole process group and forget it."""
        proc = self._proc
        self._ready = False
        self._close_fds()
        for region in (self._arguments, self._results):
            if region is not None:
                region.close()
        self._arguments = self._results = None
        if self._lender is not None:
            self._lender.close()  # the memory goes once the worker's hold on it goes too
            self._lender = None
        if proc is None:
            return
        end_group(proc)
        self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _close_fds(self, only_to_child: bool = False) -> None:
        if self._channel is not None:
            self._channel.close(only_to_child)

    def _exit_description(self) -> str:
        assert self._proc is not None
        return exit_description(self._proc, _CLOSE_GRACE_S)

    # --- the channel ---

    def _send(self, message: object, deadline: float, region: Region | None = None) -> None:
        assert self._channel is not None
        self._channel.send(message, deadline, region)

    def _receive(
        self, deadline: float, most_bytes: int | None, region: Region | None = None
    ) -> object:
        assert self._channel is not None
        return self._channel.receive(deadline, most_bytes, region)

    def _size_regions(self, invocation: Invocation, reply_bytes: int | None) -> Invocation:
        """Grow the arguments' region to the invocation's large tensors and the results' to
        what the reply may take, each within `limits.region_most_bytes`, and set aside the
        invocation's arena where it fits: on a CPU in the arguments' region after its
        tensors, on a GPU in device memory lent to the worker. The invocation returned says
        where (`Invocation.arena`, `Invocation.lent`)."""
        cpu = torch.device(self.device).type == "cpu"
        if self._lender is not None:
            invocation = self._lender.lend(invocation)
        if self._arguments is None or self._results is None:
            return invocation
        most = region_most_bytes()
        values = [a.values for c in invocation.calls for a in c.args if isinstance(a, TensorArg)]
        large = [v for v in values if v.nbytes >= REGION_LEAST_BYTES]
        arguments = sum(room(v.dtype, tuple(v.shape)) for v in large)
        if cpu:
            invocation = set_aside(invocation, arguments, most)
        start, size = invocation.arena if cpu else (0, 0)
        self._arguments.grow(min(most, max(arguments, start + size)), most)
        self._results.grow(min(most, reply_bytes or most), most)
        return invocation

    # --- memory ---

    def _watch_limits(self) -> None:
        """Every `MEMORY_POLL_S` while the auditor waits on the worker: the host memory of its
        processes, and what their cache folder holds (`limits.FolderBound`)."""
        if self._proc is None or time.monotonic() < self._next_memory_poll:
            return
        self._next_memory_poll = time.monotonic() + MEMORY_POLL_S
        limit = self.limits.host_memory_bytes
        if limit and (used := resident_bytes(self._proc.pid, self._namespaces)) > limit:
            raise OverLimit(over_memory(used, limit))
        if self._cache is not None and (why := self._cache.over()):
            raise OverLimit(why, kind="disk")

    def _kill_for(self, kind: str) -> None:
        """Kill the worker for a failure of `kind`; a cache folder past its bound ("disk") is
        emptied once nothing of the candidate's runs."""
        self._kill()
        if kind == "disk" and self._cache is not None:
            self._cache.empty()

    def _device_used(self) -> int:
        """Device memory in use by every process, less what this process's allocator holds."""
        if torch.device(self.device).type != "cuda":
            return 0
        device = torch.device(self.device)
        free, total = torch.cuda.mem_get_info(device)
        lent = self._lender.size if self._lender is not None else 0
        return total - free - torch.cuda.memory_reserved(device) - lent

    # --- stderr ---

    def _stderr_size(self) -> int:
        if self._stderr is None:
            return 0
        return os.fstat(self._stderr.fileno()).st_size

    def _stderr_tail(self, since: int) -> str:
        """The end of what the child wrote to stderr since byte `since`, for a message."""
        return "" if self._stderr is None else written_since(self._stderr, since)
