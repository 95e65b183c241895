"""The worker process: imports the candidate, answers every `Invocation` it reads with an
`InvocationResult` (`runner.worker.call`), and writes nothing but the channel's messages.

Started by `kernelaudit.runner.auditor.process.Worker` as
`python -m kernelaudit.runner.worker.main READ_FD WRITE_FD FILE ARGUMENTS_FD RESULTS_FD LENDING_FD`:
ARGUMENTS_FD and RESULTS_FD are memory files the auditor sizes (or "-"), which the invocations'
large tensors come in and the results' go out in (`runner.boundary.wire`); the calls' buffers are
laid out in the arena the auditor sets aside (`runner.boundary.arena`): on a CPU in the first, on a
GPU in device memory the auditor lends the worker through the socket LENDING_FD
(`runner.boundary.lent`). Its first message names the device, the device memory it may hold, the
function to call in FILE and the canary pattern to guard buffers with (`Load`), so the process can
start before the auditor knows them (`runner.auditor.prestart`). It then takes a snapshot of the
process-wide state, imports the candidate once, says it is ready, and answers every invocation.
After a CUDA error (the context can no longer be trusted), a crash or an exhausted memory limit it
answers and exits; the auditor starts a new one.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import select
import socket
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

import torch

from kernelaudit.errors import UsageError
from kernelaudit.interpret import casts, patches
from kernelaudit.runner.boundary.arena import Arena, Memory
from kernelaudit.runner.boundary.failures import describe
from kernelaudit.runner.boundary.guard import prepare, use_canary
from kernelaudit.runner.boundary.lent import KEPT_BYTES, Lent, receive
from kernelaudit.runner.boundary.memory import read_memory
from kernelaudit.runner.boundary.messages import (
    REPEAT_ASKED,
    REPEAT_TOLD,
    Invocation,
    InvocationResult,
    Load,
)
from kernelaudit.runner.boundary.shared import Region
from kernelaudit.runner.boundary.state import snapshot
from kernelaudit.runner.boundary.wire import decode, encode
from kernelaudit.runner.candidate import CandidateRef, load_candidate
from kernelaudit.runner.worker.call import run_invocation
from kernelaudit.runner.worker.watch import Watch

_CLOSE_GRACE_S = 1.0
"""After the auditor's end of the channel closes, the seconds a worker has to end on its own."""
_LENDING_TIMEOUT_S = 60.0
"""How long the worker waits for lent memory an invocation names: the auditor sends it first,
so only a broken channel makes it wait at all."""


def _send(fd: int, message: object, region: Region | None = None) -> None:
    if region is not None:
        region.refresh()  # the size the auditor grew it to
    for view in encode(message, region):
        while view:
            view = view[os.write(fd, view) :]


def _receive(fd: int, region: Region | None = None) -> object | None:
    """The next message, or None when the auditor has closed the channel."""

    def read(count: int) -> bytearray:
        data = _read(fd, count)
        if region is not None:
            region.refresh()  # the auditor grew it before it sent the message
        return data

    try:
        # the invocation's tensors stay in the region, which the auditor writes again only
        # with the next one: the calls' buffers are filled from there, with no copy between
        return decode(read, region=region, views=True)
    except EOFError:
        return None


def _regions(named: Sequence[str]) -> tuple[Region | None, Region | None]:
    """The arguments' and the results' regions the auditor passed ("-": none)."""
    if "-" in named:
        return None, None
    arguments, results = (Region(int(fd)) for fd in named)
    return arguments, results


def _read(fd: int, count: int) -> bytearray:
    data = bytearray(count)
    view = memoryview(data)
    done = 0
    while done < count:
        got = os.readv(fd, [view[done:]])
        if not got:
            raise EOFError("the auditor closed the channel")
        done += got
    return data


def _exit_with_the_auditor(reader: int) -> None:
    """End this process once the auditor's end of the channel is gone (it closed it, or it
    died): a candidate stuck in a loop would never read the channel again. The channel says
    so whatever process ids look like from here (a sandbox has its own)."""

    def watch() -> None:
        hangup = select.poll()
        hangup.register(reader, 0)  # no events asked for: hang-ups and errors only
        while not hangup.poll():
            pass
        time.sleep(_CLOSE_GRACE_S)  # a worker told to stop ends on its own first
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: Sequence[str]) -> int:
    read_fd, write_fd, path, *named = argv
    reader, writer = int(read_fd), int(write_fd)
    arguments, results = _regions(named[:2] or ["-", "-"])
    lending = _lending(named[2:])
    # Whatever the candidate prints goes to stderr, never into the channel.
    os.dup2(2, 1)
    faulthandler.enable()
    _exit_with_the_auditor(reader)
    kept = [r.fd for r in (arguments, results) if r is not None]
    for fd in (reader, writer, *kept, *([lending.fileno()] if lending else [])):
        os.set_inheritable(fd, False)
    load = _receive(reader)
    if load is None:
        return 0
    assert isinstance(load, Load), type(load)
    if load.canary:
        use_canary(load.canary)
    device = torch.device(load.device)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        _limit_device_memory(device, load.gpu_memory_bytes)
        if arguments is not None:
            arguments.pin()  # the calls' buffers are filled from it at the bus's speed
    watch = Watch()
    if device.type == "cuda":
        watch.streams.install()
    pristine = snapshot(device)
    try:
        ref = CandidateRef(path, load.function, CandidateRef.parse_autograd(load.autograd))
        candidate = load_candidate(ref)
    except UsageError as error:
        _send(writer, ("usage", str(error)))
        return 0
    except BaseException as error:
        _send(writer, ("exception", describe(error)))
        return 0
    watch.import_changes = pristine.changes_to(snapshot(device))
    watch.launches.install(candidate)
    casts.install()  # Triton's interpreter's float casts a faster way, the same bits
    patches.install()  # and its builtins listed once, the same patches
    watch.folder = str(Path(path).resolve().parent)
    if device.type == "cuda":
        prepare(device)
        watch.memory_at_load = read_memory(device)
    _send(writer, ("ready",))
    lent: Lent | None = None
    while True:
        invocation = _receive(reader, arguments)
        if invocation is None:
            return 0
        try:
            assert isinstance(invocation, Invocation), type(invocation)
            if device.type == "cpu":
                arena = _arena(arguments, invocation)
            else:
                lent = _lent_for(invocation, lending, device, lent)
                arena = _arena(lent, invocation) if invocation.lent else None
            result = run_invocation(
                candidate,
                invocation,
                device,
                watch,
                arena,
                ask=lambda index: _ask(reader, writer, index),
            )
        except BaseException:
            result = InvocationResult(
                calls=(),
                error="the worker failed while running the candidate:\n" + traceback.format_exc(),
                error_kind="crash",
            )
        _send(writer, result, results)
        if result.error_kind in ("cuda", "crash", "memory"):
            # The device context (or the worker) cannot be trusted any more; leave at once.
            sys.stderr.flush()
            os._exit(0)
        if lent is not None and lent.size > KEPT_BYTES:
            lent.close()  # as the auditor does: the device's memory is its between invocations
            lent = None
        del invocation, result
        # The young generations hold what the invocation left in cycles; a whole collection
        # (a tenth of a second with torch loaded) waits for the calls that measure memory.
        gc.collect(1)
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _ask(reader: int, writer: int, index: int) -> bool:
    """The auditor's answer to whether call `index` makes its repetitions: asked only once the
    call is made, so nothing in this process said so while the candidate ran."""
    _send(writer, (REPEAT_ASKED, index))
    answer = _receive(reader)
    if not (isinstance(answer, tuple) and len(answer) == 2 and answer[0] == REPEAT_TOLD):
        raise RuntimeError(f"the auditor answered {answer!r} to whether to repeat call {index}")
    return bool(answer[1])


def _arena(memory: Memory | None, invocation: Invocation) -> Arena | None:
    """The stretch of `memory` (the invocation's region, or the device memory lent for it)
    the auditor set aside for its calls' buffers."""
    start, size = invocation.arena
    if memory is None or size <= 0:
        return None
    return Arena(memory, start, size)


def _lending(named: Sequence[str]) -> socket.socket | None:
    """The socket the auditor lends device memory through ("-" or missing: none)."""
    if not named or named[0] == "-":
        return None
    channel = socket.socket(fileno=int(named[0]))
    channel.settimeout(_LENDING_TIMEOUT_S)  # what it names was sent before the invocation
    return channel


def _lent_for(
    invocation: Invocation,
    lending: socket.socket | None,
    device: torch.device,
    lent: Lent | None,
) -> Lent | None:
    """The device memory the invocation's arena lies in, mapped: `lent` when it is the block
    the invocation names (or it names none), else the new block, taken from the channel
    (the one it replaces is unmapped here)."""
    if not invocation.lent or (lent is not None and lent.serial == invocation.lent):
        return lent
    if lending is None:
        raise OSError("the invocation names lent device memory, but there is no channel for it")
    if lent is not None:
        lent.close()
    return receive(lending, device, invocation.lent)


def _limit_device_memory(device: torch.device, limit: int) -> None:
    """Cap what torch's allocator may hold for the candidate; allocations beyond fail with an
    out-of-memory error. (Memory taken around torch is watched by the auditor.)"""
    if limit <= 0:
        return
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total), device)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
