"""Calls made by several host threads at once, each on a device stream and buffers of its own."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from kernelaudit.runner.boundary.failures import CandidateFailure, classify, describe
from kernelaudit.runner.boundary.messages import Call, GuardBreach
from kernelaudit.runner.boundary.poison import PoisonMode
from kernelaudit.runner.worker.contention import bit_mismatches
from kernelaudit.runner.worker.placing import buffers_for, check_guards, returned_outputs, to_cpu
from kernelaudit.runner.worker.staging import Staged
from kernelaudit.runner.worker.watch import fingerprints
from kernelaudit.timing.measure import synchronize

if TYPE_CHECKING:
    from collections.abc import Callable

    from kernelaudit.runner.worker.watch import Watch


def concurrent_calls(
    candidate: Callable[..., object],
    call: Call,
    index: int,
    device: torch.device,
    watch: Watch,
    alone: tuple[torch.Tensor, ...],
    breaches: list[GuardBreach],
    staged: Staged | None = None,
) -> dict[str, Any]:
    """`call.threads` host threads call the candidate at once, each on a device stream of
    its own with its own guarded copies of the inputs and outputs (placed from `staged`'s
    device copies where it holds them), its own poisoned allocations; released together so
    their calls overlap. Returns the CallOutcome fields they fill."""
    count = call.threads
    cuda = device.type == "cuda"
    while cuda and len(watch.callers) < count:
        watch.callers.append(torch.cuda.Stream(device))
    buffers = [buffers_for(call, device, {}, staged=staged) for _ in range(count)]
    modes = [PoisonMode(call.poison, call.sentinel) for _ in range(count)]
    if cuda:
        for stream in watch.callers[:count]:
            stream.wait_stream(torch.cuda.current_stream(device))  # the inputs are in place
    returned: list[object] = [None] * count
    errors = [""] * count
    go = threading.Event()

    def caller(k: int) -> None:
        placed = buffers[k]
        args = [placed.inputs[p].view if p in placed.inputs else a for p, a in enumerate(call.args)]
        slot_views = [s.view for s in placed.slots]
        try:
            if cuda:
                torch.cuda.set_device(device)  # a thread starts on the default device
            on_stream = torch.cuda.stream(watch.callers[k]) if cuda else contextlib.nullcontext()
            go.wait()
            with on_stream, modes[k]:
                returned[k] = candidate(*args, *slot_views)
        except BaseException as error:
            errors[k] = describe(error)

    callers = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(count)]
    try:
        for thread in callers:
            thread.start()
    finally:
        go.set()  # threads already started must not wait for ever
    for thread in callers:
        if thread.ident is not None:
            thread.join()
    try:
        synchronize(device)
    except BaseException as error:
        raise classify(error, device) from None
    mismatches: list[tuple[int, int, int, int, float]] = []
    outputs: list[tuple[torch.Tensor, ...]] = []
    for k, placed in enumerate(buffers):
        produced: tuple[torch.Tensor, ...] = ()
        if not errors[k]:
            try:
                produced = tuple(s.view for s in placed.slots) or returned_outputs(returned[k])
            except CandidateFailure as failure:
                errors[k] = failure.message
        guarded = [*placed.inputs.values(), *placed.slots, *modes[k].allocations]
        named = [replace(g, label=f"{g.label} (thread {k})") for g in guarded]
        breaches.extend(check_guards(named, index))
        mismatches += bit_mismatches(produced, alone, k)
        outputs.append(produced)
    try:
        copies = tuple(tuple(to_cpu(t) for t in produced) for produced in outputs if call.keep)
    except Exception as error:
        raise classify(error, device) from None
    return {
        "mismatches": tuple(mismatches),
        "thread_outputs": copies,
        "thread_fingerprints": tuple(fingerprints(produced) for produced in outputs),
        "thread_errors": tuple(errors),
    }
