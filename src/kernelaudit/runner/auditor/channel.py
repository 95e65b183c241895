"""The auditor's end of the pipes to one worker: every write and read held to a deadline, and
while it waits, the worker's death and its host memory watched. What a worker sends is decoded
within a bound the auditor sets (`runner.boundary.wire`); whatever fails to decode comes back as the
error, for the caller to judge, never raised."""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable

from kernelaudit.runner.auditor.launch import PIPE_BYTES
from kernelaudit.runner.auditor.limits import exited
from kernelaudit.runner.boundary.shared import Region
from kernelaudit.runner.boundary.wire import decode, encode

POLL_S = 0.05
"""How often a wait looks at the worker's life and memory."""


class Timeout(Exception):
    """The deadline passed before the worker read or answered."""


class Died(Exception):
    """The worker is gone, or its channel carries garbage no worker sends."""


class OverLimit(Exception):
    """The worker's processes use more than they may (the text says what and how much):
    host memory (`kind` "memory"), or their cache folder's disk ("disk")."""

    def __init__(self, text: str, kind: str = "memory") -> None:
        super().__init__(text)
        self.kind = kind


class Channel:
    """The pipes to and from a worker (`to_child`, `from_child`, owned from here on).
    `watch()` runs while a read or a write waits, and raises `OverLimit` to stop it."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        to_child: int,
        from_child: int,
        watch: Callable[[], None],
    ) -> None:
        self.process = process
        self.to_child = to_child
        self.from_child = from_child
        self.watch = watch

    def send(self, message: object, deadline: float, region: Region | None = None) -> None:
        for view in encode(message, region):
            while view:
                self._wait_for(self.to_child, deadline, writing=True)
                try:
                    written = os.write(self.to_child, view[:PIPE_BYTES])
                except BlockingIOError:
                    continue
                except OSError as error:
                    raise Died() from error
                view = view[written:]

    def receive(
        self, deadline: float, most_bytes: int | None, region: Region | None = None
    ) -> object:
        """The worker's next message, or the exception that decoding it raised."""
        try:
            return decode(lambda count: self._read(count, deadline), most_bytes, region=region)
        except (Died, Timeout, OverLimit):
            raise
        except Exception as error:  # whatever garbage on the channel made decoding fail
            return error

    def close(self, only_to_child: bool = False) -> None:
        """Close the pipe to the worker (it reads the end of its channel), and unless
        `only_to_child`, the pipe from it."""
        if self.to_child >= 0:
            os.close(self.to_child)
            self.to_child = -1
        if not only_to_child and self.from_child >= 0:
            os.close(self.from_child)
            self.from_child = -1

    def _read(self, count: int, deadline: float) -> bytearray:
        try:
            data = bytearray(count)
        except MemoryError:
            raise Died() from None  # a length no real result has: the channel is garbage
        view = memoryview(data)
        done = 0
        while done < count:
            self._wait_for(self.from_child, deadline, writing=False)
            got = os.readv(self.from_child, [view[done:]])
            if not got:
                raise Died()
            done += got
        return data

    def _wait_for(self, fd: int, deadline: float, writing: bool) -> None:
        """Wait until `fd` is ready, the worker dies (`Died`), the deadline passes
        (`Timeout`) or `watch` raises.

        The worker's death is watched for itself: a process the candidate started may hold
        the pipe open after the worker is gone.
        """
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout()
            self.watch()
            if _ready(fd, writing, min(remaining, POLL_S)):
                return
            if exited(self.process) is not None:
                if _ready(fd, writing, 0.0):
                    return
                raise Died()


def _ready(fd: int, writing: bool, wait: float) -> bool:
    if writing:
        return bool(select.select([], [fd], [], wait)[1])
    return bool(select.select([fd], [], [], wait)[0])
