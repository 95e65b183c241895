"""The candidate's side of a training experiment: a process that answers slot calls.

`python -m kernelaudit.training.worker READ_FD WRITE_FD DEVICE PATH FUNCTION ARGUMENTS_FD
RESULTS_FD` imports the candidate, says whether it could, then answers every call the auditor
sends (the slot's arguments: tensors on the CPU, or places in the arguments' shared region)
with what the candidate returned for them on DEVICE (placed in the results' region where they
fit, on the CPU otherwise), until the auditor closes the channel. "-" for the regions: none.
The model, the optimizers, the losses and the drift stay with the auditor
(`training.channel`), which validates every answer: nothing computed here is believed beyond
the tensors of a result, whose number, shapes and dtypes the auditor checks.

Messages go through `runner.boundary.wire`: tensors travel as raw bytes beside a pickle of plain
values, or stay in the shared regions (`runner.boundary.shared`) and are named by their place there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

import torch

from kernelaudit.interpret import casts, patches
from kernelaudit.runner.boundary.ending import end_now
from kernelaudit.runner.boundary.shared import Region, SharedTensor
from kernelaudit.runner.boundary.wire import decode, encode
from kernelaudit.runner.candidate import CandidateRef, load_candidate
from kernelaudit.training.slots import describe

_MESSAGE_CHARS = 4000
"""An error message sent back is cut to this many characters."""


def main(argv: Sequence[str]) -> int:
    reads, writes, device, path, function, into, out_of = argv
    channel = _Channel(int(reads), int(writes))
    regions = None if "-" in (into, out_of) else (Region(int(into)), Region(int(out_of)))
    if regions is not None and torch.device(device).type == "cuda":
        for region in regions:
            region.pin()
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)  # tiny matmuls: threads cost more than they give
    ref = CandidateRef(path, function)
    try:
        candidate = load_candidate(ref)
    except BaseException as error:
        channel.send(("failed", _cut(f"loading {ref.label} failed: {_told(error)}")))
        return 0
    casts.install()  # Triton's interpreter's float casts a faster way, the same bits
    patches.install()  # and its builtins listed once, the same patches
    channel.send(("ready",))
    while (arguments := channel.receive()) is not None:
        assert isinstance(arguments, tuple), "the auditor sends each call's arguments as a tuple"
        channel.send(answer(candidate, arguments, device, regions))
    return 0


def answer(
    candidate: Callable[..., object],
    arguments: tuple[object, ...],
    device: str,
    regions: tuple[Region, Region] | None = None,
) -> object:
    """The reply to one call: ("result", the tensor, or the tuple or list of tensors, the
    candidate returned: in the results' region, or moved to the CPU); ("wrong", what it
    returned instead, in words); or ("raised", its exception as "<Type>: <message>")."""
    if regions is not None:
        for region in regions:
            region.refresh()  # the auditor grows them
    on_device = [_argument(a, device, regions) for a in arguments]
    there = next(a.device for a in on_device if isinstance(a, torch.Tensor))
    try:
        result = candidate(*on_device)
        items = list(result) if isinstance(result, (tuple, list)) else [result]
        if not all(isinstance(r, torch.Tensor) and r.device == there for r in items):
            return ("wrong", _cut(describe(result)))
        # plain tensors: a subclass's own ways of serialising itself never run
        plain = [r.detach().as_subclass(torch.Tensor) for r in items]
        placed = None if regions is None else regions[1].put(plain)
        moved: list[object] = [r.to("cpu") for r in plain] if placed is None else list(placed)
    except Exception as error:  # the candidate's failure, told to the auditor
        return ("raised", _cut(_told(error)))
    if isinstance(result, list):
        return ("result", moved)
    return ("result", tuple(moved) if isinstance(result, tuple) else moved[0])


def _argument(argument: object, device: str, regions: tuple[Region, Region] | None) -> object:
    if isinstance(argument, SharedTensor):
        assert regions is not None, "the auditor places arguments only where there are regions"
        return regions[0].take(argument, device)
    return argument.to(device) if isinstance(argument, torch.Tensor) else argument


def _told(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _cut(text: str) -> str:
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."


class _Channel:
    """Blocking reads and writes of `runner.boundary.wire` messages on two pipe ends."""

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
            return decode(self._read, shared=True)
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
    end_now(main(sys.argv[1:]))  # the auditor closed the channel: no teardown to wait for
