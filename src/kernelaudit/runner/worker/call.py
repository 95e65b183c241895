"""One invocation of the candidate, inside its worker: each call on guarded, poisoned buffers
(`placing`), with what the harness watches around it (state, threads, streams, deferred
work, memory), timed and profiled where asked. This code runs in the candidate's process: what
it reports is what the candidate let it see (see docs/threat-model.md)."""

from __future__ import annotations

import functools
import gc
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import Any

import torch

from kernelaudit.runner.boundary.arena import Arena, repeated_slots
from kernelaudit.runner.boundary.failures import NOT_RUN, CandidateFailure, classify
from kernelaudit.runner.boundary.guard import GuardedTensor, holds, prepare
from kernelaudit.runner.boundary.memory import kept_since, peak_since, read_memory, start_peak
from kernelaudit.runner.boundary.messages import (
    Call,
    CallOutcome,
    GuardBreach,
    Invocation,
    InvocationResult,
    Placement,
    TensorArg,
    changed,
)
from kernelaudit.runner.boundary.poison import PoisonMode, fill_poison
from kernelaudit.runner.boundary.state import snapshot
from kernelaudit.runner.worker.autotuners import (
    NotOffered,
    find_autotuners,
    forcing,
    pick_untimed,
    unrunnable,
)
from kernelaudit.runner.worker.autotuners import describe as describe_autotuners
from kernelaudit.runner.worker.contention import Noise, bit_mismatches
from kernelaudit.runner.worker.overlap import aliases
from kernelaudit.runner.worker.placing import (
    Placed,
    buffers_for,
    check_guards,
    named_after_output,
    output_buffers,
    returned_outputs,
    tensors_in,
    to_cpu,
)
from kernelaudit.runner.worker.staging import Staged, asked_once, with_room
from kernelaudit.runner.worker.threaded import concurrent_calls
from kernelaudit.runner.worker.watch import (
    Watch,
    changed_later,
    describe_output,
    fingerprints,
    scrub_free_memory,
    threads_started,
)
from kernelaudit.timing.kernels import profile_kernels
from kernelaudit.timing.measure import synchronize, time_calls

# Captured before the candidate is imported: a candidate may replace the module attributes.
_clock = time.perf_counter
_sleep = time.sleep


def run_invocation(
    candidate: Callable[..., object],
    invocation: Invocation,
    device: torch.device,
    watch: Watch | None = None,
    arena: Arena | None = None,
    ask: Callable[[int], bool] | None = None,
    staged: Staged | None = None,
) -> InvocationResult:
    """Run the calls in order; stop at the first that fails, keeping what came before. The
    calls' fresh buffers are taken from `arena` where there is one. `ask(index)`: whether a
    call with repetitions (`Call.repeat`) makes them, asked of the auditor once the call is
    made (default: the call's `repeat_calls`). The large inputs' device copies the calls are
    placed from are `staged`'s (`runner.worker.staging`; one of the invocation's own by default),
    let go when the invocation ends."""
    watch = watch or Watch()
    staged = staged or Staged(device)
    try:
        once = asked_once(ask) if ask is not None else None
        return _run_invocation(candidate, invocation, device, watch, arena, once, staged)
    finally:
        staged.release()


def _run_invocation(
    candidate: Callable[..., object],
    invocation: Invocation,
    device: torch.device,
    watch: Watch,
    arena: Arena | None,
    ask: Callable[[int], bool] | None,
    staged: Staged,
) -> InvocationResult:
    outcomes: list[CallOutcome] = []
    breaches: list[GuardBreach] = []
    placements: list[Placement] = []
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
            placements=tuple(placements),
            **fields,  # type: ignore[arg-type]
        )

    for index, call in enumerate(invocation.calls):
        holding = [t for outputs in held for t in outputs] + list(alone)
        holding += [g.buffer for p in placed.values() for g in (*p.inputs.values(), *p.slots)]
        try:
            with forcing(call.autotune, tuners) as launches:
                outcome, outputs, buffers = with_room(
                    staged,
                    breaches,
                    arena,
                    functools.partial(
                        run_call,
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
                        always_return=invocation.always_return,
                        arena=arena,
                        ask=ask,
                        staged=staged,
                    ),
                )
        except NotOffered as error:
            return result(changed_later=changed_later(held, outcomes), not_run=str(error))
        except CandidateFailure as failure:
            if failure.kind == NOT_RUN:
                return result(changed_later=changed_later(held, outcomes), not_run=failure.message)
            changed = () if failure.kind == "cuda" else changed_later(held, outcomes)
            return result(changed_later=changed, error=failure.message, error_kind=failure.kind)
        if call.autotune is not None:
            outcome = replace(outcome, forced_runs=launches[0])
        outcomes.append(outcome)
        if call.reuse is None:
            placements.extend(buffers.placements(index))
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
    always_return: Collection[int] = (),
    arena: Arena | None = None,
    ask: Callable[[int], bool] | None = None,
    staged: Staged | None = None,
) -> tuple[CallOutcome, tuple[torch.Tensor, ...], Placed]:
    """One call on fresh guarded inputs (or on an earlier call's buffers, rewritten). Appends
    the guard breaches it sees to `breaches`.

    alone: the device outputs that a call under noise or with threads is compared with.
    noise_s: how long the noise of a call under noise should last (what a call took alone).
    holding: device tensors the harness holds from earlier calls of the invocation, left out
        of the memory the call is said to keep.
    always_return: of `return_inputs`, those sent back even when the call left them as they
        were (`Invocation.always_return`).
    arena: where the call's fresh buffers are taken from (`runner.boundary.arena`), if anywhere.
    ask: whether the call's repetitions are made, asked with the call's index once the call
        is made (`run_invocation`).
    staged: the device copies of large inputs the call is placed from and compared with
        (`runner.worker.staging`), where there are any.

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
    buffers = buffers_for(call, device, placed or {}, arena, staged)
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
    launches_before = watch.launches.launched
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
        produced = tuple(slot_views) if slots else tensors_in(returned)
        early = fingerprints(produced) if device.type != "cpu" or call.settle_s else None
        synchronize(device)
    except BaseException as error:
        reason = unrunnable(error) if call.autotune is not None else None
        if reason is not None:
            raise CandidateFailure(NOT_RUN, reason) from None
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
        scratch = [named_after_output(a, outputs) for a in mode.allocations]
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
        _after(p, inputs, call, p not in always_return, staged) for p in return_inputs
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
        interpreted_launches=(
            watch.launches.launched - launches_before if watch.launches.defined > 0 else -1
        ),
        state_changes=state_before.changes_to(snapshot(device)),
        noise_kernels=noise_kernels,
    )
    if measured:
        # the harness lets go of the scratch it guarded: what stays is the candidate's
        mode.allocations.clear()
        scratch.clear()
        assert watch.memory_at_load is not None
        harness = [*holding, *(g.buffer for g in guarded_all), *outputs]
        harness += staged.tensors() if staged is not None else []
        if arena is not None:  # lent by the auditor: never in the allocator's count
            harness = [t for t in harness if not arena.lies_in(t)]
        held, unseen = kept_since(
            device,
            watch.memory_at_load,
            harness,
            watch.noise.nbytes if watch.noise is not None else 0,
        )
        outcome = replace(
            outcome, device_bytes_held=held, device_bytes_unseen=unseen, device_peak_bytes=peak
        )
    if call.repeat:
        made = ask(index) if ask is not None else call.repeat_calls
        _repeated(candidate, args, call, device, buffers, arena, made)
    if (call.noise or call.threads or call.queued) and alone:
        outcome = replace(outcome, mismatches=tuple(bit_mismatches(outputs, alone, -1)))
    if call.threads:
        found = concurrent_calls(candidate, call, index, device, watch, alone, breaches, staged)
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


def _repeated(
    candidate: Callable[..., object],
    args: list[object],
    call: Call,
    device: torch.device,
    buffers: Placed,
    arena: Arena | None,
    made: bool,
) -> None:
    """`call.repeat` more calls on the call's inputs, back to back: nothing of the harness
    runs between them, and the device is waited for once, at the end. Each repetition leaves
    its results in buffers of its own (`buffers.repeats`, in the arena where there is one):
    the slots it fills, or copies of what it returns. The auditor times the invocation and
    reads those buffers (`engine.clocked`); nothing here is measured. Unless `made`, the
    buffers are laid out and no call made."""
    shapes = repeated_slots(call)
    for j in range(call.repeat):
        buffers.repeats.append(output_buffers(call, shapes, f"repeat {j} output", device, arena))
    try:
        for targets in buffers.repeats if made else ():
            views = [g.view for g in targets]
            if call.slots:
                candidate(*args, *views)
                continue
            for view, result in zip(views, tensors_in(candidate(*args)), strict=False):
                if result.shape == view.shape:
                    view.copy_(result.detach())
        synchronize(device)
    except BaseException as error:
        raise classify(error, device) from None


def _after(
    position: int,
    inputs: dict[int, GuardedTensor],
    call: Call,
    only_changed: bool,
    staged: Staged | None = None,
) -> torch.Tensor | None:
    """What argument `position` holds after the call, on the CPU; with `only_changed`, None
    for a tensor that holds bit for bit the values the call gave it (`TensorArg.values`, on
    the CPU, or their device copy in `staged`; compared on the device after the call,
    `guard.holds`)."""
    if position not in inputs:
        return torch.tensor(call.args[position], device="cpu")
    view = inputs[position].view
    given = call.args[position]
    if only_changed and isinstance(given, TensorArg):
        values = staged.on_device(given.values) if staged is not None else given.values
        if holds(view, values):
            return None
    return to_cpu(view)


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
        produced = tuple(slot_views) if slots else tensors_in(result)
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
