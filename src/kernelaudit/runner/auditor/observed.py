"""What the auditor sees for itself in an invocation's memory, after the worker's reply.

The worker lays the calls' inputs and output slots out in the invocation's arena
(`runner.boundary.arena`: shared host memory on a CPU, device memory the auditor lent it on a GPU)
and says where each went. Its own observations of them (guard bands, inputs left as given, slots
as copied) are made by code in the candidate's process, which the candidate can rebind. Here
the auditor reads the same bytes through its own mapping:

- every fresh buffer of every call that finished must be where the worker says, of the size
  and layout the call gives it, in the arena and apart from the others; a reply that places
  them otherwise (or not at all) is not one whose observations can be checked, and the
  candidate fails `execution`;
- the guard bands and the gaps of strided layouts are checked against the canary the auditor
  drew: a breach the worker did not report is added;
- every input the contract does not let the candidate write is compared with what the call
  was given (the last call that wrote into its buffer): a change the worker did not report
  is added to the call's `inputs_after`; on a GPU against the auditor's own device copy of
  those values, made for the first call of a case and held for the next (`device_copies`);
- a kept slot that no later repetition, profile or call rewrote must still hold the bytes
  the worker sent: where it does not, its values changed after they were copied (work left
  running), and the output is added to the call's `deferred`;
- the buffers of a call's repetitions (`Call.repeat`, made for the auditor's clock) must hold
  the results the call sent, bit for bit: a repetition whose buffer does not was not made as
  it was timed (`CallOutcome.repeats_unlike`).

A candidate can still compute on memory of its own and copy its results into the arena (its
outputs are judged either way; it hides its out-of-bounds writes); see docs/threat-model.md.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import torch

from kernelaudit.device_copies import DEVICE_COPIES
from kernelaudit.host_copies import host_copy
from kernelaudit.runner.boundary.arena import Memory, repeated_slots
from kernelaudit.runner.boundary.guard import (
    CANARY_BYTES,
    GuardedTensor,
    breach,
    guarded_in,
    guarded_nbytes,
    holds,
    laid_out,
)
from kernelaudit.runner.boundary.messages import (
    Call,
    CallOutcome,
    GuardBreach,
    Invocation,
    InvocationResult,
    Placement,
    TensorArg,
)
from kernelaudit.runner.boundary.shared import ALIGN


class Unplaced(Exception):
    """The reply does not place the calls' buffers where the auditor can read them."""


_Layout = tuple[tuple[int, ...], torch.dtype, str]


def observe(
    invocation: Invocation, result: InvocationResult, region: Memory | None, canary: bytes
) -> InvocationResult:
    """`result` with what the arena shows added to it; a "tampered" failure in its place when
    its placements are not those of the calls that finished, or cannot be read. What only the
    auditor may say of a call (`CallOutcome.repeats_read`) is cleared from the reply first."""
    result = _disowned(result)
    start, size = invocation.arena
    if size <= 0 or result.error or region is None:
        return result
    try:
        return _observed(invocation, result, region, canary, start, start + size)
    except Unplaced as unplaced:
        why = str(unplaced)
    except Exception as error:  # the reply is the worker's to write: anything may be in it
        why = f"the reply's account of its calls could not be read ({type(error).__name__}: "
        why += f"{error})"
    return InvocationResult(
        calls=(),
        error=f"{why}; the auditor cannot check what the worker reported, and the worker "
        "was killed.",
        error_kind="tampered",
    )


def _observed(
    invocation: Invocation,
    result: InvocationResult,
    region: Memory,
    canary: bytes,
    start: int,
    end: int,
) -> InvocationResult:
    if not isinstance(result.calls, tuple) or not isinstance(result.placements, tuple):
        raise Unplaced("the reply's calls or placements are not lists of them")
    finished = invocation.calls[: len(result.calls)]
    expected = _expected(finished)
    buffers = _buffers(result.placements, expected, region, start, end)
    calls = list(result.calls)
    breaches = list(result.breaches)
    repeats: dict[int, list[tuple[int, int, torch.Tensor]]] = {}
    for (call, label), guarded in sorted(buffers.items()):
        writers = [call, *(r for r, c in enumerate(finished) if c.reuse == call)]
        found = breach(guarded, call, canary)
        if found is not None and not _reported(result.breaches, label, writers):
            breaches.append(found)
        *kind, position = label.split(" ")
        last = writers[-1]
        if kind == ["input"]:
            calls[last] = _input_after(invocation, calls[last], int(position), guarded.view, last)
        elif kind[0] == "repeat":
            repeats.setdefault(call, []).append((int(kind[1]), int(position), guarded.view))
        elif len(writers) == 1:
            calls[call] = _slot_after(finished[call], calls[call], int(position), guarded.view)
    for call, views in repeats.items():
        if finished[call].repeat_calls:
            calls[call] = _repeats_read(calls[call], views)
    return replace(result, calls=tuple(calls), breaches=tuple(breaches))


def _expected(calls: tuple[Call, ...]) -> dict[tuple[int, str], _Layout]:
    """The fresh buffers of `calls`: (call, "input p" / "output k") -> shape, dtype, layout."""
    expected: dict[tuple[int, str], _Layout] = {}
    for index, call in enumerate(calls):
        if call.reuse is not None:
            continue
        for position, arg in enumerate(call.args):
            if isinstance(arg, TensorArg):
                values = arg.values
                expected[index, f"input {position}"] = (
                    tuple(values.shape),
                    values.dtype,
                    arg.layout,
                )
        for k, slot in enumerate(call.slots):
            expected[index, f"output {k}"] = (tuple(slot.shape), slot.dtype, "contiguous")
        for j in range(call.repeat):
            for k, slot in enumerate(repeated_slots(call)):
                key = (index, f"repeat {j} output {k}")
                expected[key] = (tuple(slot.shape), slot.dtype, "contiguous")
    return expected


def _buffers(
    placements: tuple[Placement, ...],
    expected: dict[tuple[int, str], _Layout],
    region: Memory,
    start: int,
    end: int,
) -> dict[tuple[int, str], GuardedTensor]:
    """The guarded buffers the placements name, read through the auditor's mapping."""
    found: dict[tuple[int, str], GuardedTensor] = {}
    spans: list[tuple[int, int, str]] = []
    for place in placements:
        if not isinstance(place, Placement):
            raise Unplaced(f"the reply lists a {type(place).__name__} among its placements")
        key = (place.call, place.tensor)
        if key not in expected or key in found:
            raise Unplaced(
                f"the reply places {place.tensor} of call {place.call}, which the invocation "
                "does not give a fresh buffer, or places it twice"
            )
        shape, dtype, layout = expected[key]
        nbytes = guarded_nbytes(shape, dtype, layout)
        offset, phase = place.offset, place.phase
        if (
            type(offset) is not int
            or offset % ALIGN
            or not start <= offset <= end - nbytes
            or type(phase) is not int
            or not 0 <= phase < CANARY_BYTES
        ):
            raise Unplaced(
                f"the reply places {place.tensor} of call {place.call} ({nbytes:,} bytes) at "
                f"offset {offset!r}, phase {phase!r}: not an aligned place inside the arena "
                f"({start:,} to {end:,})"
            )
        spans.append((offset, offset + nbytes, f"{place.tensor} of call {place.call}"))
        found[key] = _guarded(region, place, shape, dtype, layout, nbytes)
    spans.sort()
    for (_, first_end, first), (second_start, _, second) in itertools.pairwise(spans):
        if second_start < first_end:
            raise Unplaced(f"the reply places {first} and {second} in overlapping memory")
    missing = sorted(set(expected) - set(found))
    if missing:
        call, label = missing[0]
        raise Unplaced(
            f"{label} of call {call} was not laid out in the memory the auditor set aside "
            f"for it ({len(missing)} buffer(s) in all): the candidate's process changed how "
            "its calls' tensors are placed"
        )
    return found


def _guarded(
    region: Memory,
    place: Placement,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    layout: str,
    nbytes: int,
) -> GuardedTensor:
    where = laid_out(shape, layout)
    buffer = region.bytes_at(place.offset, nbytes)
    return guarded_in(
        place.tensor,
        buffer,
        shape,
        where.stride,
        dtype,
        where.storage_offset,
        place.phase,
        place.offset,
    )


def _reported(breaches: tuple[GuardBreach, ...], label: str, calls: list[int]) -> bool:
    return any(b.tensor == label and b.call in calls for b in breaches)


def _input_after(
    invocation: Invocation, outcome: CallOutcome, position: int, view: torch.Tensor, call: int
) -> CallOutcome:
    """`outcome` with input `position`'s values after the call where the worker said it was
    left as given and the arena shows otherwise."""
    if position not in invocation.return_inputs or position in invocation.always_return:
        return outcome
    j = invocation.return_inputs.index(position)
    given = invocation.calls[call].args[position]
    if j >= len(outcome.inputs_after) or outcome.inputs_after[j] is not None:
        return outcome
    assert isinstance(given, TensorArg)
    if holds(view, _given_on(given.values, view.device)):
        return outcome
    after = list(outcome.inputs_after)
    after[j] = host_copy(view)
    return replace(outcome, inputs_after=tuple(after))


def _given_on(values: torch.Tensor, where: torch.device) -> torch.Tensor:
    """The auditor's `values` on `where` to be compared there: its copy there made for an
    earlier call of the same case and held (`device_copies`), or one made now and held for
    the next; `values` itself where the device has no room for one (`holds` copies or
    compares on the host)."""
    if where.type == "cpu":
        return values
    try:
        return DEVICE_COPIES.copied(values, where)
    except torch.OutOfMemoryError:
        return values


def _disowned(result: InvocationResult) -> InvocationResult:
    """`result` with no call claiming what only the auditor's own reading establishes."""
    if not isinstance(result.calls, tuple) or not all(
        isinstance(c, CallOutcome) for c in result.calls
    ):
        return result  # not a reply whose calls can be read: `_observed` says so
    if not any(c.repeats_read or c.repeats_unlike for c in result.calls):
        return result
    calls = tuple(replace(c, repeats_read=False, repeats_unlike=()) for c in result.calls)
    return replace(result, calls=calls)


def _repeats_read(outcome: CallOutcome, views: list[tuple[int, int, torch.Tensor]]) -> CallOutcome:
    """`outcome` with the repetitions whose buffers (repetition, output, view) do not hold
    the call's own results, bit for bit, as the auditor reads them (in the buffer's dtype,
    as the worker copies a result of another dtype; an output of another shape than declared
    is not copied, and not compared)."""
    unlike = set()
    for repetition, k, view in views:
        sent = outcome.outputs[k] if k < len(outcome.outputs) else None
        shaped = sent is not None and tuple(sent.shape) == tuple(view.shape)
        if sent is None or (shaped and not holds(view.contiguous(), sent.to(view.dtype))):
            unlike.add(repetition)
    return replace(outcome, repeats_read=True, repeats_unlike=tuple(sorted(unlike)))


def _slot_after(call: Call, outcome: CallOutcome, k: int, view: torch.Tensor) -> CallOutcome:
    """`outcome` with slot `k` among its deferred outputs where the slot no longer holds the
    bytes the worker sent for it (a slot no repetition or profile rewrote)."""
    if not call.keep or call.timed or call.profiled or call.threads:
        return outcome
    if k >= len(outcome.outputs) or k in outcome.deferred:
        return outcome
    if holds(view.contiguous(), outcome.outputs[k]):
        return outcome
    return replace(outcome, deferred=(*outcome.deferred, k))
