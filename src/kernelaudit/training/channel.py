"""The auditor's side of the candidate's training process: the candidate, called as a slot.

The model, its optimizers, losses and drift stay in the auditor; only the plugged slot's calls
cross to the candidate's process (`kernelaudit.training.worker`), which runs under the sandbox
like every process that imports a candidate, and lives as long as the experiment: one process
answers every call of every run. Each call sends the slot's arguments as they are after the
plug's casts, tensors as raw bytes (`runner.boundary.wire`); each answer is bounded by what the slot
declares for those arguments (`slots.declared_results`, sizes the auditor computes itself) before
any of it is read, and checked against the same declaration before the model uses it (`Slots`).

An answer that is not one (too large, undecodable, not of the protocol's form), a process that
dies, and a run past the experiment's deadline stop the process for good: `stopped` says why,
and every later call raises `ChannelStopped`.

Where the platform has them, the tensors themselves do not go through the pipe: the arguments
are copied into one shared memory region and the results come back in another
(`runner.boundary.shared`), the message naming each tensor's place. The auditor sizes both, the
results' to the declared results; a result that does not fit comes through the pipe, bounded as
before.
"""

from __future__ import annotations

import math
import os
import select
import subprocess
import tempfile
import time
from types import TracebackType
from typing import IO

import torch

from kernelaudit.runner.auditor.launch import PIPE_BYTES, end_group, start_piped
from kernelaudit.runner.auditor.limits import exited, exited_within, until_exit
from kernelaudit.runner.boundary import shared
from kernelaudit.runner.boundary.shared import Region, SharedTensor
from kernelaudit.runner.boundary.wire import TooLarge, decode, encode
from kernelaudit.runner.candidate import CandidateRef
from kernelaudit.training.slots import PlugRaised, Result, declared_results, wrong_result

_READY_BYTES = 1 << 20
"""The most the answer to loading the candidate may take: "ready", or why loading failed."""

_ANSWER_SLACK_BYTES = 1 << 20
"""An answer may take this much besides eight bytes per declared result element: the pickle
around the tensors, or a message in words."""

_POLL_S = 0.05
_CLOSE_GRACE_S = 2.0
_STDERR_TAIL_BYTES = 4000
_MESSAGE_CHARS = 2000


class ChannelStopped(Exception):
    """The candidate's process can answer no more calls."""


class _Stop(Exception):
    """Why the process must stop, raised while waiting on it."""


def _answer_bound(declared: tuple[Result, ...]) -> int:
    """The most bytes an answer to a call with these declared results may announce: eight
    bytes per element (a wider dtype than declared still arrives, and fails as wrong), plus
    `_ANSWER_SLACK_BYTES`."""
    return _ANSWER_SLACK_BYTES + sum(8 * math.prod(r.shape) for r in declared)


class CandidateProcess:
    """The candidate imported in a sandboxed process of its own, called like the slot's
    function: `Plug(slot, process, dtypes)`.

    `launch` starts the process; `ready` waits until it has imported the candidate and returns
    why it could not ("" when it could). Calls are answered in order, one at a time. Every
    wait ends at `deadline_s` seconds after `launch`, the time the candidate's runs may take.
    """

    def __init__(self, candidate: CandidateRef, slot: str, device: str, deadline_s: float) -> None:
        self.candidate = candidate
        self.slot = slot
        self.device = device
        self.deadline_s = deadline_s
        self.stopped = ""
        """Why the process answers no more calls ("" while it does)."""
        self._deadline = math.inf
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._to_child = -1
        self._from_child = -1
        self._ready: str | None = None
        self._arguments: Region | None = None
        self._results: Region | None = None

    def __enter__(self) -> CandidateProcess:
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
        # held open for the process's whole life: a death's message quotes its end
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        regions: list[str] = ["-", "-"]
        if shared.available():
            try:
                self._arguments = Region.create("slot-arguments")
                self._results = Region.create("slot-results")
            except OSError:  # a kernel or a filter that refuses them: the pipe carries all
                self._close_regions()
        if self._arguments is not None and self._results is not None:
            regions = [str(self._arguments.fd), str(self._results.fd)]
            if torch.device(self.device).type == "cuda":
                self._arguments.pin()
                self._results.pin()
        arguments = [self.device, self.candidate.path, self.candidate.function, *regions]
        child = start_piped(
            "kernelaudit.training.worker",
            arguments,
            self.device,
            self.candidate.path,
            self._stderr,
            keep_fds=[r.fd for r in (self._arguments, self._results) if r is not None],
        )
        self._proc = child.process
        self._to_child, self._from_child = child.to_child, child.from_child
        self._deadline = time.monotonic() + self.deadline_s

    def ready(self) -> str:
        """Wait until the candidate is imported; why it could not be ("" when it was)."""
        if self._ready is None:
            self._ready = self._imported()
        return self._ready

    def _imported(self) -> str:
        try:
            said = self._receive(_READY_BYTES)
        except _Stop as stop:
            return self._stop(str(stop))
        if said == ("ready",):
            return ""
        if isinstance(said, tuple) and len(said) == 2 and said[0] == "failed":
            self.stopped = _cut(str(said[1]))  # the candidate's own exception, as it was raised
            self._kill()
            return self.stopped
        return self._stop(
            f"the candidate's process said {_kind(said)} instead of whether it imported "
            f"{self.candidate.label}"
        )

    def __call__(self, *arguments: object) -> object:
        """The candidate's result for one call of the slot: a tensor, or a tuple or list of
        tensors, on the device of the arguments. Raises `PlugRaised` when the candidate raised,
        RuntimeError when it returned anything but tensors on that device, and
        `ChannelStopped` when the process can answer no more."""
        self.ready()
        if self.stopped:
            raise ChannelStopped(self.stopped)
        declared = declared_results(self.slot, arguments)
        try:
            self._send(self._message(arguments, declared))
            said = self._receive(_answer_bound(declared))
        except _Stop as stop:
            raise ChannelStopped(self._stop(str(stop))) from None
        kind, value = said if isinstance(said, tuple) and len(said) == 2 else (None, None)
        if kind == "raised" and isinstance(value, str):
            raise PlugRaised(_cut(value))
        there = next(a.device for a in arguments if isinstance(a, torch.Tensor))
        if kind == "wrong" and isinstance(value, str):
            raise wrong_result(self.slot, _cut(value), declared, there)
        single = isinstance(value, (torch.Tensor, SharedTensor))
        items = (value,) if single else value if isinstance(value, (tuple, list)) else None
        moved = None if kind != "result" or items is None else self._taken(items, there)
        if moved is None:
            raise ChannelStopped(
                self._stop(
                    f"the candidate's process answered a call of slot {self.slot!r} with "
                    f"{_kind(said)}, which is not an answer; it was stopped"
                )
            )
        assert isinstance(value, (torch.Tensor, SharedTensor, tuple, list))
        return moved[0] if single else type(value)(moved)

    def _message(self, arguments: tuple[object, ...], declared: tuple[Result, ...]) -> object:
        """The call as sent: the tensors in the arguments' region where there is one (and the
        results' region grown to what the call declares), on the CPU in the message
        otherwise."""
        tensors = [a for a in arguments if isinstance(a, torch.Tensor)]
        if self._arguments is None or self._results is None:
            return tuple(a.cpu() if isinstance(a, torch.Tensor) else a for a in arguments)
        self._arguments.grow(sum(shared.room(t.dtype, tuple(t.shape)) for t in tensors))
        self._results.grow(sum(shared.room(r.dtype, r.shape) for r in declared))
        places = self._arguments.put(tensors)
        assert places is not None, "the region was grown to hold them"
        told = iter(places)
        return tuple(next(told) if isinstance(a, torch.Tensor) else a for a in arguments)

    def _taken(
        self, items: tuple[object, ...] | list[object], there: torch.device
    ) -> list[torch.Tensor] | None:
        """The answer's tensors on `there`, each the auditor's own copy; None when one is
        neither a tensor nor a place inside the results' region."""
        moved = []
        for item in items:
            if type(item) is torch.Tensor:
                moved.append(item.to(there))
            elif type(item) is SharedTensor and self._results is not None:
                try:
                    moved.append(self._results.take(item, there))
                except ValueError:
                    return None
            else:
                return None
        return moved

    def close(self) -> None:
        """Stop the process and everything it started."""
        if self._to_child >= 0:
            os.close(self._to_child)
            self._to_child = -1
        if self._proc is not None:
            until_exit(self._proc, _CLOSE_GRACE_S)  # left for `_kill` to reap
        self._kill()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._close_regions()

    def _close_regions(self) -> None:
        for region in (self._arguments, self._results):
            if region is not None:
                region.close()
        self._arguments = self._results = None

    # --- the process's end ---

    def _stop(self, why: str) -> str:
        """Kill the process for `why`, which `stopped` keeps and which is returned."""
        if not self.stopped:
            self.stopped = why + self._stderr_tail()
        self._kill()
        return self.stopped

    def _kill(self) -> None:
        for fd in (self._to_child, self._from_child):
            if fd >= 0:
                os.close(fd)
        self._to_child = self._from_child = -1
        proc, self._proc = self._proc, None
        if proc is None:
            return
        end_group(proc)

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        end = os.fstat(self._stderr.fileno()).st_size
        start = max(0, end - _STDERR_TAIL_BYTES)
        text = os.pread(self._stderr.fileno(), end - start, start).decode(errors="replace")
        lines = text.strip().splitlines()[-3:]
        return f"; its last output: {' / '.join(lines)}" if lines else ""

    # --- I/O with the deadline ---

    def _send(self, message: object) -> None:
        for view in encode(message):
            while view:
                self._wait_for(self._to_child, writing=True)
                try:
                    written = os.write(self._to_child, view[:PIPE_BYTES])
                except BlockingIOError:
                    continue
                except OSError:
                    raise _Stop(self._death()) from None
                view = view[written:]

    def _receive(self, most_bytes: int) -> object:
        try:
            return decode(self._read, most_bytes, shared=True)
        except _Stop:
            raise
        except TooLarge as large:
            raise _Stop(
                f"{large}, which the slot's declared results cannot fill; the candidate wrote to "
                "its channel or returned far more than its results, and it was stopped"
            ) from None
        except Exception as error:  # whatever garbage on the channel made decoding fail
            raise _Stop(
                f"the candidate's process sent something that is not a message ({error}); the "
                "candidate may have written to its channel, and it was stopped"
            ) from None

    def _read(self, count: int) -> bytearray:
        data = bytearray(count)
        view = memoryview(data)
        done = 0
        while done < count:
            self._wait_for(self._from_child, writing=False)
            got = os.readv(self._from_child, [view[done:]])
            if not got:
                raise _Stop(self._death())
            done += got
        return data

    def _wait_for(self, fd: int, writing: bool) -> None:
        """Wait until `fd` is ready; _Stop once the deadline has passed or the process died.
        Its death is watched for itself: a process it started may hold the pipe open."""
        assert self._proc is not None
        while True:
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                raise _Stop(
                    f"the candidate's training runs took longer than {self.deadline_s:.0f} s"
                )
            if _ready(fd, writing, min(remaining, _POLL_S)):
                return
            if exited(self._proc) is not None:
                if _ready(fd, writing, 0.0):
                    return
                raise _Stop(self._death())

    def _death(self) -> str:
        assert self._proc is not None
        code = exited_within(self._proc, _CLOSE_GRACE_S)
        if code is None:
            return "the candidate's training process closed its channel but is still running"
        return f"the candidate's training process died (exit {code})"


def _ready(fd: int, writing: bool, wait: float) -> bool:
    if writing:
        return bool(select.select([], [fd], [], wait)[1])
    return bool(select.select([fd], [], [], wait)[0])


def _kind(said: object) -> str:
    if isinstance(said, tuple) and said and isinstance(said[0], str):
        return f"a message {said[0][:40]!r}"
    return f"a {type(said).__name__}"


def _cut(text: str) -> str:
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."
