"""The candidate's side of a training experiment: a process that answers slot calls.

`python -m kernelaudit.training.worker READ_FD WRITE_FD DEVICE PATH FUNCTION` imports the
candidate, says whether it could, then answers every call the auditor sends (the slot's
arguments, tensors on the CPU) with what the candidate returned for them on DEVICE, until the
auditor closes the channel. The model, the optimizers, the losses and the drift stay with the
auditor (`training.channel`), which validates every answer: nothing computed here is believed
beyond the tensors of a result, whose number, shapes and dtypes the auditor checks.

Messages go through `runner.wire`: tensors travel as raw bytes beside a pickle of plain values.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

import torch

from kernelaudit.runner.candidate import CandidateRef, load_candidate
from kernelaudit.runner.wire import decode, encode
from kernelaudit.training.slots import describe

_MESSAGE_CHARS = 4000
"""An error message sent back is cut to this many characters."""


def main(argv: Sequence[str]) -> int:
    reads, writes, device, path, function = argv
    channel = _Channel(int(reads), int(writes))
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)  # tiny matmuls: threads cost more than they give
    ref = CandidateRef(path, function)
    try:
        candidate = load_candidate(ref)
    except BaseException as error:
        channel.send(("failed", _cut(f"loading {ref.label} failed: {_told(error)}")))
        return 0
    channel.send(("ready",))
    while (arguments := channel.receive()) is not None:
        assert isinstance(arguments, tuple), "the auditor sends each call's arguments as a tuple"
        channel.send(answer(candidate, arguments, device))
    return 0


def answer(candidate: Callable[..., object], arguments: tuple[object, ...], device: str) -> object:
    """The reply to one call: ("result", the tensor, or the tuple or list of tensors, the
    candidate returned, moved to the CPU); ("wrong", what it returned instead, in words); or
    ("raised", its exception as "<Type>: <message>")."""
    on_device = [a.to(device) if isinstance(a, torch.Tensor) else a for a in arguments]
    there = next(a.device for a in on_device if isinstance(a, torch.Tensor))
    try:
        result = candidate(*on_device)
        items = list(result) if isinstance(result, (tuple, list)) else [result]
        if not all(isinstance(r, torch.Tensor) and r.device == there for r in items):
            return ("wrong", _cut(describe(result)))
        # plain tensors: a subclass's own ways of serialising itself never run
        moved = [r.detach().to("cpu").as_subclass(torch.Tensor) for r in items]
    except Exception as error:  # the candidate's failure, told to the auditor
        return ("raised", _cut(_told(error)))
    if isinstance(result, list):
        return ("result", moved)
    return ("result", tuple(moved) if isinstance(result, tuple) else moved[0])


def _told(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _cut(text: str) -> str:
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."


class _Channel:
    """Blocking reads and writes of `runner.wire` messages on two pipe ends."""

    def __init__(self, reads: int, writes: int) -> None:
        self.reads = reads
        self.writes = writes

    def send(self, message: object) -> None:
        for view in encode(message):
            while view:
                view = view[os.write(self.writes, view) :]

    def receive(self) -> object | None:
        """The next message; None once the auditor has closed its end."""
        try:
            return decode(self._read)
        except EOFError:
            return None

    def _read(self, count: int) -> bytearray:
        data = bytearray(count)
        view = memoryview(data)
        done = 0
        while done < count:
            got = os.readv(self.reads, [view[done:]])
            if not got:
                raise EOFError
            done += got
        return data


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
