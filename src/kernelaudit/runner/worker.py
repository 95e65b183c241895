"""The worker process: runs the candidate on guarded, poisoned inputs and reports what it saw.

Started by `kernelaudit.runner.process.Worker` as
`python -m kernelaudit.runner.worker READ_FD WRITE_FD DEVICE GPU_BYTES PATH FUNCTION`. It
takes a snapshot of the process-wide state, imports the candidate once, says it is ready, then
answers every `Invocation` it reads with an `InvocationResult`. After a CUDA error (the
context can no longer be trusted), a crash or an exhausted memory limit it answers and exits;
the auditor starts a new one.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import gc
import os
import select
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from kernelaudit.errors import UsageError
from kernelaudit.runner.autotuners import (
    NotOffered,
    find_autotuners,
    forcing,
    pick_untimed,
    unrunnable,
)
from kernelaudit.runner.autotuners import describe as describe_autotuners
from kernelaudit.runner.candidate import CandidateRef, load_candidate
from kernelaudit.runner.contention import Noise, bit_mismatches
from kernelaudit.runner.guard import (
    GuardedTensor,
    allocate,
    breach,
    contiguous_geometry,
    place,
    prepare,
    storage_span,
)
from kernelaudit.runner.memory import (
    DeviceMemory,
    kept_since,
    peak_since,
    read_memory,
    start_peak,
)
from kernelaudit.runner.messages import (
    Call,
    CallOutcome,
    GuardBreach,
    Invocation,
    InvocationResult,
    StateChange,
    TensorArg,
)
from kernelaudit.runner.poison import PoisonMode, fill_poison, poison_value
from kernelaudit.runner.state import snapshot
from kernelaudit.runner.watch import (
    StreamCount,
    changed,
    describe_output,
    fingerprint,
    fingerprints,
    scrub_free_memory,
    threads_started,
)
from kernelaudit.runner.wire import decode, encode
from kernelaudit.timing.kernels import profile_kernels
from kernelaudit.timing.measure import synchronize, time_calls

_HARNESS_DIR = str(Path(__file__).resolve().parent)
_MESSAGE_CHARS = 6000
_CLOSE_GRACE_S = 1.0
"""After the auditor's end of the channel closes, the seconds a worker has to end on its own."""


class CandidateFailure(Exception):
    """The candidate failed to run a call; `kind` is an `InvocationResult.error_kind`."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


# Captured before the candidate is imported: a candidate may replace the module attributes.
_clock = time.perf_counter
_sleep = time.sleep


@dataclass
class Placed:
    """The buffers one call ran on, kept while a later call of the invocation reuses them."""

    inputs: dict[int, GuardedTensor]
    slots: list[GuardedTensor]


@dataclass
class Watch:
    """What the worker keeps across invocations: what importing the candidate changed, the
    count of streams created, and what measuring under contention and memory needs."""

    import_changes: tuple[StateChange, ...] = ()
    streams: StreamCount = field(default_factory=StreamCount)
    folder: str = ""
    """The candidate's folder: autotuners are looked for in the modules loaded from it."""
    memory_at_load: DeviceMemory | None = None
    """The device's memory once the candidate was imported, before any call (CUDA): what a
    call leaves allocated is counted from here."""
    noise: Noise | None = None
    """The side stream and scratch of the noise kernels, made on first use and kept."""
    callers: list[torch.cuda.Stream] = field(default_factory=list)
    """The streams concurrent threads call the candidate on, made on first use and kept."""


_NOT_RUN = "not-run"
"""The kind of a `CandidateFailure` that is none: a forced autotuner configuration that the
autotuner does not offer for the call, or that this device cannot compile."""


def run_invocation(
    candidate: Callable[..., object],
    invocation: Invocation,
    device: torch.device,
    watch: Watch | None = None,
) -> InvocationResult:
    """Run the calls in order; stop at the first that fails, keeping what came before."""
    watch = watch or Watch()
    outcomes: list[CallOutcome] = []
    breaches: list[GuardBreach] = []
    held: list[tuple[torch.Tensor, ...]] = []
    reused = {call.reuse for call in invocation.calls if call.reuse is not None}
    placed: dict[int, Placed] = {}
    contended = any(call.noise or call.threads or call.queued for call in invocation.calls)
    # the first call's outputs on the device, which calls under contention are compared with
    alone: tuple[torch.Tensor, ...] = ()
    tuners = _autotuners(candidate, device, watch)

    def result(**fields: object) -> InvocationResult:
        return InvocationResult(
            calls=tuple(outcomes),
            breaches=tuple(breaches),
            import_changes=watch.import_changes,
            autotuners=describe_autotuners(_autotuners(candidate, device, watch)),
            **fields,  # type: ignore[arg-type]
        )

    for index, call in enumerate(invocation.calls):
        holding = [t for outputs in held for t in outputs] + list(alone)
        holding += [g.buffer for p in placed.values() for g in (*p.inputs.values(), *p.slots)]
        try:
            with forcing(call.autotune, tuners) as launches:
                outcome, outputs, buffers = run_call(
                    candidate,
                    call,
                    index,
                    invocation.return_inputs,
                    device,
                    breaches,
                    placed,
                    watch,
                    alone=alone,
                    noise_s=outcomes[0].seconds if outcomes else 0.0,
                    holding=holding,
                )
        except NotOffered as error:
            return result(changed_later=changed_later(held, outcomes), not_run=str(error))
        except CandidateFailure as failure:
            if failure.kind == _NOT_RUN:
                return result(changed_later=changed_later(held, outcomes), not_run=failure.message)
            changed = () if failure.kind == "cuda" else changed_later(held, outcomes)
            return result(changed_later=changed, error=failure.message, error_kind=failure.kind)
        if call.autotune is not None:
            outcome = replace(outcome, forced_runs=launches[0])
        outcomes.append(outcome)
        held.append(outputs if call.keep else ())
        if index == 0 and contended:
            alone = outputs
        if index in reused:
            placed[index] = buffers
        # what the harness does not hold must be free before the next call measures memory
        del outcome, outputs, buffers
    return result(changed_later=changed_later(held, outcomes))


def _autotuners(
    candidate: Callable[..., object], device: torch.device, watch: Watch
) -> dict[str, Any]:
    found = find_autotuners(watch.folder, candidate)
    if device.type == "cpu":
        pick_untimed(found.values())
    return found


def run_call(
    candidate: Callable[..., object],
    call: Call,
    index: int,
    return_inputs: Sequence[int],
    device: torch.device,
    breaches: list[GuardBreach],
    placed: dict[int, Placed] | None = None,
    watch: Watch | None = None,
    alone: tuple[torch.Tensor, ...] = (),
    noise_s: float = 0.0,
    holding: Sequence[torch.Tensor] = (),
) -> tuple[CallOutcome, tuple[torch.Tensor, ...], Placed]:
    """One call on fresh guarded inputs (or on an earlier call's buffers, rewritten). Appends
    the guard breaches it sees to `breaches`.

    alone: the device outputs that a call under noise or with threads is compared with.
    noise_s: how long the noise of a call under noise should last (what a call took alone).
    holding: device tensors the harness holds from earlier calls of the invocation, left out
        of the memory the call is said to keep.

    Returns what goes back to the auditor, the outputs as they live on the device (held until
    the invocation ends, to see whether later calls change them) and the buffers used.
    """
    watch = watch or Watch()
    cuda = device.type == "cuda"
    measured = call.memory and cuda
    if measured:
        # garbage in reference cycles, whoever made it, must not count as memory kept
        gc.collect()
    if measured and watch.memory_at_load is None:
        prepare(device)
        watch.memory_at_load = read_memory(device)  # a worker started without `main`
    buffers = _buffers(call, device, placed or {})
    inputs, slots = buffers.inputs, buffers.slots
    args = [inputs[p].view if p in inputs else arg for p, arg in enumerate(call.args)]
    slot_views = [s.view for s in slots]
    if call.scrub:
        scrub_free_memory(device)
    if (call.noise or call.queued) and cuda and watch.noise is None:
        watch.noise = Noise(device)  # its stream made before the call's streams are counted
    state_before = snapshot(device)
    threads_before = set(threading.enumerate())
    streams_before = watch.streams.created
    mode = PoisonMode(call.poison, call.sentinel)
    guarded_all = [*inputs.values(), *slots]
    noise_kernels = watch.noise.launch(noise_s) if call.noise and watch.noise is not None else 0
    if call.queued and watch.noise is not None:
        noise_kernels += watch.noise.queue_ahead([g.view for g in inputs.values()], noise_s)
    allocated_before = start_peak(device) if measured else 0
    peak = -1

    started = _clock()
    try:
        with mode:
            returned = candidate(*args, *slot_views)
        if measured:
            peak = peak_since(device, allocated_before)
        produced = tuple(slot_views) if slots else _tensors_in(returned)
        early = fingerprints(produced) if device.type != "cpu" or call.settle_s else None
        synchronize(device)
    except BaseException as error:
        reason = unrunnable(error) if call.autotune is not None else None
        if reason is not None:
            raise CandidateFailure(_NOT_RUN, reason) from None
        failure = classify(error, device)
        if failure.kind != "cuda":
            breaches.extend(check_guards([*guarded_all, *mode.allocations], index))
        raise failure from None
    seconds = _clock() - started
    if call.settle_s:
        _sleep(call.settle_s)
        synchronize(device)

    outputs: tuple[torch.Tensor, ...] = ()
    try:
        outputs = tuple(slot_views) if slots else returned_outputs(returned)
    finally:
        scratch = [_named_after_output(a, outputs) for a in mode.allocations]
        breaches.extend(check_guards([*guarded_all, *scratch], index))
    late = fingerprints(outputs)
    deferred = changed(early, late) if early is not None else ()
    try:
        sent = tuple(to_cpu(t) for t in outputs) if call.keep else ()
    except Exception as error:
        failure = classify(error, device)
        message = f"copying the outputs failed:\n{failure.message}"
        raise CandidateFailure(failure.kind, message) from None
    inputs_after = tuple(
        to_cpu(inputs[p].view) if p in inputs else torch.tensor(call.args[p], device="cpu")
        for p in return_inputs
    )
    outcome = CallOutcome(
        outputs=sent,
        inputs_after=inputs_after,
        aliases=aliases(outputs, {p: g.view for p, g in inputs.items()}),
        seconds=seconds,
        objects=() if slots else tuple(describe_output(o) for o in outputs),
        fingerprints=late,
        deferred=deferred,
        threads=threads_started(threads_before),
        streams=watch.streams.created - streams_before,
        state_changes=state_before.changes_to(snapshot(device)),
        noise_kernels=noise_kernels,
    )
    if measured:
        # the harness lets go of the scratch it guarded: what stays is the candidate's
        mode.allocations.clear()
        scratch.clear()
        assert watch.memory_at_load is not None
        harness = [*holding, *(g.buffer for g in guarded_all), *outputs]
        held, unseen = kept_since(
            device,
            watch.memory_at_load,
            harness,
            watch.noise.nbytes if watch.noise is not None else 0,
        )
        outcome = replace(
            outcome, device_bytes_held=held, device_bytes_unseen=unseen, device_peak_bytes=peak
        )
    if (call.noise or call.threads or call.queued) and alone:
        outcome = replace(outcome, mismatches=tuple(bit_mismatches(outputs, alone, -1)))
    if call.threads:
        found = _concurrent_calls(candidate, call, index, device, watch, alone, breaches)
        outcome = replace(outcome, mismatches=outcome.mismatches + found.pop("mismatches"))
        outcome = replace(outcome, **found)
    if call.timed:
        outcome = _timed(candidate, args, slots, call, device, outcome)
        breaches.extend(check_guards(guarded_all, index))
    if call.profiled:
        try:
            profile = profile_kernels(lambda: candidate(*args, *slot_views), device)
        except BaseException as error:
            raise classify(error, device) from None
        outcome = replace(outcome, kernels=profile)
    return outcome, outputs, buffers


def _concurrent_calls(
    candidate: Callable[..., object],
    call: Call,
    index: int,
    device: torch.device,
    watch: Watch,
    alone: tuple[torch.Tensor, ...],
    breaches: list[GuardBreach],
) -> dict[str, Any]:
    """`call.threads` host threads call the candidate at once, each on a device stream of
    its own with its own guarded copies of the inputs and outputs, its own poisoned
    allocations; released together so their calls overlap. Returns the CallOutcome fields
    they fill."""
    count = call.threads
    cuda = device.type == "cuda"
    while cuda and len(watch.callers) < count:
        watch.callers.append(torch.cuda.Stream(device))
    buffers = [_buffers(call, device, {}) for _ in range(count)]
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


def _buffers(call: Call, device: torch.device, placed: dict[int, Placed]) -> Placed:
    """Fresh guarded buffers for the call's tensors, or the buffers of the call it reuses with
    this call's values written in (through an alias, so the tensors the candidate sees keep
    their identity, address and version counter)."""
    if call.reuse is not None and call.reuse in placed:
        earlier = placed[call.reuse]
        for position, arg in enumerate(call.args):
            if isinstance(arg, TensorArg) and position in earlier.inputs:
                rewrite(earlier.inputs[position].view, arg.values)
        for slot in earlier.slots:
            value = poison_value(call.poison, slot.view.dtype, call.sentinel)
            rewrite(slot.view, torch.full((), value))
        return earlier
    inputs = {
        position: place(f"input {position}", arg.values, arg.layout, device)
        for position, arg in enumerate(call.args)
        if isinstance(arg, TensorArg)
    }
    slots = []
    for k, slot in enumerate(call.slots):
        stride = contiguous_geometry(tuple(slot.shape)).stride
        guarded = allocate(f"output {k}", tuple(slot.shape), stride, slot.dtype, device)
        fill_poison(guarded.view, call.poison, call.sentinel)
        slots.append(guarded)
    return Placed(inputs, slots)


def rewrite(view: torch.Tensor, values: torch.Tensor) -> None:
    """Copy `values` into `view`'s elements without touching `view`'s version counter: the
    copy goes through a second tensor over the same storage, which has a counter of its own."""
    alias = torch.empty(0, dtype=view.dtype, device=view.device)
    alias.set_(view.untyped_storage(), view.storage_offset(), view.shape, view.stride())
    with torch.no_grad():
        alias.copy_(values.to(view.device).expand(view.shape))


def _tensors_in(returned: object) -> tuple[torch.Tensor, ...]:
    if isinstance(returned, torch.Tensor):
        return (returned,)
    if isinstance(returned, (tuple, list)):
        return tuple(t for t in returned if isinstance(t, torch.Tensor))
    return ()


def _timed(
    candidate: Callable[..., object],
    args: list[object],
    slots: list[GuardedTensor],
    call: Call,
    device: torch.device,
    outcome: CallOutcome,
) -> CallOutcome:
    """Time repeated calls on the call's inputs; every repetition's outputs are fingerprinted
    (destination slots poisoned again before the next, the allocator's free memory scrubbed),
    and the last ones sent back. All of it outside the timed regions."""
    slot_views = [s.view for s in slots]
    seen: list[tuple[str, ...]] = []
    last: list[tuple[torch.Tensor, ...]] = [()]

    def after_each(result: object, repetition: int) -> None:
        produced = tuple(slot_views) if slots else _tensors_in(result)
        seen.append(fingerprints(produced))
        if slots:
            # the slots are poisoned again for the next repetition: keep this one's values
            last[0] = tuple(view.clone() for view in slot_views)
            for view in slot_views:
                fill_poison(view, call.poison, call.sentinel)
        else:
            last[0] = produced
        # an output left unwritten in the next repetition must not find this one's values
        scrub_free_memory(device)

    for view in slot_views:
        fill_poison(view, call.poison, call.sentinel)
    try:
        timing = time_calls(
            lambda: candidate(*args, *slot_views),
            device,
            on_output=after_each,
            sync=lambda: synchronize(device),  # the reference captured before the import
            clock=_clock,
        )
        timed_outputs = tuple(to_cpu(t) for t in last[0])
    except BaseException as error:
        raise classify(error, device) from None
    return replace(
        outcome, timing=timing, timed_fingerprints=tuple(seen), timed_outputs=timed_outputs
    )


def returned_outputs(returned: object) -> tuple[torch.Tensor, ...]:
    """The outputs of a return-style candidate: one tensor, or a tuple or list of them."""
    if isinstance(returned, torch.Tensor):
        return (returned,)
    if isinstance(returned, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in returned):
        return tuple(returned)
    if isinstance(returned, (tuple, list)):
        kinds = ", ".join(type(t).__name__ for t in returned)
        what = f"a {type(returned).__name__} of ({kinds})"
    else:
        what = "None" if returned is None else f"a {type(returned).__name__}"
    raise CandidateFailure(
        "contract",
        f"the candidate returned {what}; it must return its outputs: a tensor, or a tuple of "
        "tensors in the declared order.",
    )


def check_guards(guarded: Sequence[GuardedTensor], call: int) -> list[GuardBreach]:
    return [b for b in (breach(g, call) for g in guarded) if b is not None]


def aliases(outputs: Sequence[torch.Tensor], inputs: dict[int, torch.Tensor]) -> tuple[str, ...]:
    """Outputs whose bytes overlap an input's or another output's ("output 0 ~ input 2")."""
    found = []
    for i, output in enumerate(outputs):
        found += [f"output {i} ~ input {p}" for p, t in inputs.items() if _overlap(output, t)]
        found += [f"output {k} ~ output {i}" for k in range(i) if _overlap(outputs[k], output)]
    return tuple(found)


def changed_later(
    held: Sequence[tuple[torch.Tensor, ...]], outcomes: Sequence[CallOutcome]
) -> tuple[tuple[int, int], ...]:
    """(call, output) pairs whose device values no longer have the bits they had when the call
    returned."""
    changed = []
    for c, (outputs, outcome) in enumerate(zip(held, outcomes, strict=True)):
        for o, (live, then) in enumerate(zip(outputs, outcome.fingerprints, strict=False)):
            try:
                now = fingerprint(live)
            except Exception:
                changed.append((c, o))
                continue
            if now != then:
                changed.append((c, o))
    return tuple(changed)


def to_cpu(tensor: torch.Tensor) -> torch.Tensor:
    """A plain, contiguous CPU copy: no strides, subclasses or autograd history come along."""
    copy = torch.empty(tuple(tensor.shape), dtype=tensor.dtype, device="cpu")
    with torch.no_grad():
        copy.copy_(tensor.detach())
    return copy


def classify(error: BaseException, device: torch.device) -> CandidateFailure:
    """Kind "cuda" when the device context can no longer be trusted, "memory" when an
    allocation failed (the limit, or the machine), else "exception"."""
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return CandidateFailure("memory", describe(error))
    if device.type != "cpu" and (_names_device_error(error) or not _device_usable(device)):
        return CandidateFailure("cuda", describe(error))
    return CandidateFailure("exception", describe(error))


def describe(error: BaseException) -> str:
    """The exception's type, message and traceback, without the harness's own frames."""
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if not f.filename.startswith(_HARNESS_DIR) and not f.filename.startswith("<frozen ")
    ]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(type(error), error)
    cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    if cause is not None:
        lines.append("raised while handling: ")
        lines += traceback.format_exception_only(type(cause), cause)
    text = "".join(lines).rstrip()
    return text if len(text) <= _MESSAGE_CHARS else "...\n" + text[-_MESSAGE_CHARS:]


def _names_device_error(error: BaseException) -> bool:
    accelerator_error = getattr(torch, "AcceleratorError", None)
    if accelerator_error is not None and isinstance(error, accelerator_error):
        return True
    text = str(error)
    return "CUDA error" in text or "Triton Error [CUDA]" in text


def _device_usable(device: torch.device) -> bool:
    try:
        synchronize(device)
    except Exception:
        return False
    return True


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    ra, rb = _byte_range(a), _byte_range(b)
    if ra is None or rb is None or a.device != b.device:
        return False
    return ra[0] < rb[1] and rb[0] < ra[1]


def _byte_range(t: torch.Tensor) -> tuple[int, int] | None:
    if type(t) is not torch.Tensor or t.layout != torch.strided or t.numel() == 0:
        return None
    start = t.data_ptr()
    return start, start + storage_span(tuple(t.shape), tuple(t.stride())) * t.element_size()


def _named_after_output(
    allocation: GuardedTensor, outputs: Sequence[torch.Tensor]
) -> GuardedTensor:
    """An allocation the candidate returned is reported as that output, not as scratch."""
    storage = allocation.buffer.untyped_storage().data_ptr()
    for i, output in enumerate(outputs):
        if type(output) is torch.Tensor and output.untyped_storage().data_ptr() == storage:
            return replace(allocation, label=f"output {i}")
    return allocation


# --- the process ----------------------------------------------------------------------------


def _send(fd: int, message: object) -> None:
    for view in encode(message):
        while view:
            view = view[os.write(fd, view) :]


def _receive(fd: int) -> object | None:
    """The next message, or None when the auditor has closed the channel."""
    try:
        return decode(functools.partial(_read, fd))
    except EOFError:
        return None


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
    read_fd, write_fd, device_name, gpu_bytes, path, function, autograd = argv
    reader, writer = int(read_fd), int(write_fd)
    # Whatever the candidate prints goes to stderr, never into the channel.
    os.dup2(2, 1)
    faulthandler.enable()
    _exit_with_the_auditor(reader)
    for fd in (reader, writer):
        os.set_inheritable(fd, False)
    device = torch.device(device_name)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        _limit_device_memory(device, int(gpu_bytes))
    watch = Watch()
    if device.type == "cuda":
        watch.streams.install()
    pristine = snapshot(device)
    try:
        ref = CandidateRef(path, function, CandidateRef.parse_autograd(autograd))
        candidate = load_candidate(ref)
    except UsageError as error:
        _send(writer, ("usage", str(error)))
        return 0
    except BaseException as error:
        _send(writer, ("exception", describe(error)))
        return 0
    watch.import_changes = pristine.changes_to(snapshot(device))
    watch.folder = str(Path(path).resolve().parent)
    if device.type == "cuda":
        prepare(device)
        watch.memory_at_load = read_memory(device)
    _send(writer, ("ready",))
    while True:
        invocation = _receive(reader)
        if invocation is None:
            return 0
        try:
            assert isinstance(invocation, Invocation), type(invocation)
            result = run_invocation(candidate, invocation, device, watch)
        except BaseException:
            result = InvocationResult(
                calls=(),
                error="the worker failed while running the candidate:\n" + traceback.format_exc(),
                error_kind="crash",
            )
        _send(writer, result)
        if result.error_kind in ("cuda", "crash", "memory"):
            # The device context (or the worker) cannot be trusted any more; leave at once.
            sys.stderr.flush()
            os._exit(0)
        del invocation, result
        # The young generations hold what the invocation left in cycles; a whole collection
        # (a tenth of a second with torch loaded) waits for the calls that measure memory.
        gc.collect(1)
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _limit_device_memory(device: torch.device, limit: int) -> None:
    """Cap what torch's allocator may hold for the candidate; allocations beyond fail with an
    out-of-memory error. (Memory taken around torch is watched by the auditor.)"""
    if limit <= 0:
        return
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total), device)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
