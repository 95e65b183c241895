"""The auditor's own look at a call's memory (`runner.auditor.observed`): what a candidate hides by
rebinding the worker's checks in its process, the auditor still sees in the arena (shared
memory on a CPU, device memory it lent the worker on a GPU, `runner.boundary.lent`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernelaudit.device_copies import DEVICE_COPIES
from kernelaudit.runner.auditor.observed import observe
from kernelaudit.runner.auditor.process import Worker
from kernelaudit.runner.boundary.messages import (
    Call,
    CallOutcome,
    Invocation,
    InvocationResult,
    OutputSlot,
    TensorArg,
)
from kernelaudit.runner.candidate import parse_candidate

FIXTURE = Path(__file__).parents[1] / "fixtures" / "forgers.py"

X = torch.arange(1.0, 9.0)


def _run(
    function: str, device: str, calls: int = 2, layout: str = "contiguous"
) -> InvocationResult:
    """`calls` calls of `function` in a worker of its own (a forgery lasts its process)."""
    call = Call(args=(TensorArg(X, layout),), slots=(OutputSlot((8,), torch.float32),))
    invocation = Invocation(calls=(call,) * calls, return_inputs=(0,))
    with Worker(parse_candidate(f"{FIXTURE}::{function}"), device, timeout_s=60.0) as worker:
        return worker.run(invocation)


@pytest.fixture(scope="module")
def honest(module_device: str) -> Iterator[InvocationResult]:
    yield _run("honest", module_device)


def test_an_honest_candidates_buffers_are_read_where_the_worker_placed_them(
    honest: InvocationResult,
) -> None:
    assert honest.error == ""
    assert {(p.call, p.tensor) for p in honest.placements} == {
        (0, "input 0"),
        (0, "output 0"),
        (1, "input 0"),
        (1, "output 0"),
    }
    assert honest.breaches == ()
    for outcome in honest.calls:
        assert outcome.inputs_after == (None,)
        assert outcome.deferred == ()
        assert torch.equal(outcome.outputs[0], X * 2)


def test_a_write_past_the_slot_is_seen_though_the_harness_check_is_rebound(device: str) -> None:
    result = _run("hides_its_breach", device)
    assert result.error == ""
    assert sorted((b.tensor, b.call) for b in result.breaches) == [
        ("output 0", 0),
        ("output 0", 1),
    ]
    # the element past the end, 7.0 (bytes 00 00 e0 40) at bytes 32-35 of the band: the
    # canary is random per run and never 0x00, so the first two always change, and the last
    # two may already hold e0 or 40 (about one run in 60)
    assert all(b.first_offset == 32 and 2 <= b.bytes_changed <= 4 for b in result.breaches)


def test_a_zeroed_input_is_seen_though_the_harness_look_is_rebound(device: str) -> None:
    result = _run("hides_its_write", device, layout="offset")
    assert result.error == ""
    # the forgery is in place from the first call's end: every call's input comes back zeroed
    for outcome in result.calls:
        (after,) = outcome.inputs_after
        assert after is not None and torch.equal(after, torch.zeros(8))


def test_tensors_placed_out_of_the_auditors_sight_fail_the_invocation(device: str) -> None:
    result = _run("places_its_own", device)
    assert result.error_kind == "tampered"
    assert "input 0 of call 1 was not laid out in the memory the auditor set aside" in (
        result.error
    )


def test_outputs_sent_other_than_the_slot_holds_are_deferred(device: str) -> None:
    result = _run("forges_its_output", device, calls=1)
    assert result.error == ""
    (outcome,) = result.calls
    assert torch.equal(outcome.outputs[0], X * 2)  # what the forged copy sent
    assert outcome.deferred == (0,)  # the slot held 3x: changed after it was "copied"


def _run_calls(function: str, device: str, *calls: Call) -> InvocationResult:
    with Worker(parse_candidate(f"{FIXTURE}::{function}"), device, timeout_s=60.0) as worker:
        return worker.run(Invocation(calls=calls, return_inputs=(0,)))


def test_buffers_a_later_call_reuses_are_judged_with_that_calls_values(device: str) -> None:
    slot = (OutputSlot((8,), torch.float32),)
    first = Call(args=(TensorArg(X),), slots=slot)
    again = Call(args=(TensorArg(X + 10),), slots=slot, reuse=0)
    updated = Call(args=(TensorArg(X + 20),), slots=slot, reuse=0, updated=True)
    honest = _run_calls("honest", device, first, again, updated)
    assert honest.error == "" and honest.breaches == ()
    assert {(p.call, p.tensor) for p in honest.placements} == {(0, "input 0"), (0, "output 0")}
    assert [o.inputs_after for o in honest.calls] == [(None,)] * 3
    # the forger zeroes its input in every call: the arena holds the last call's, which is
    # compared with the values that call wrote in (the earlier ones' were written over)
    forged = _run_calls("hides_its_write", device, first, again, updated)
    assert forged.error == ""
    (after,) = forged.calls[2].inputs_after
    assert after is not None and torch.equal(after, torch.zeros(8))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_auditors_device_copy_of_an_input_outlasts_a_candidate_that_zeroes_it() -> None:
    """On a GPU the auditor compares each input with its own device copy of the values, made
    at the case's first call and held for the next: a candidate that writes into its input
    changes the arena, never that copy, and every later call is still judged against X."""
    DEVICE_COPIES.clear()
    try:
        first = _run("honest", "cuda")
        assert first.error == "" and [o.inputs_after for o in first.calls] == [(None,)] * 2
        held = DEVICE_COPIES.copied(X, torch.device("cuda"))
        assert DEVICE_COPIES.copied(X, torch.device("cuda")) is held
        forged = _run("hides_its_write", "cuda", layout="offset")
        for outcome in forged.calls:
            (after,) = outcome.inputs_after
            assert after is not None and torch.equal(after, torch.zeros(8))
        assert DEVICE_COPIES.copied(X, torch.device("cuda")) is held
        assert torch.equal(held.cpu(), X)
    finally:
        DEVICE_COPIES.clear()


def test_an_arena_grown_between_invocations_is_read_where_the_worker_moved(device: str) -> None:
    """A later invocation needing more room than the first gets a larger arena (a larger
    block of lent device memory on a GPU): both are read where the worker placed them."""
    spec = parse_candidate(f"{FIXTURE}::hides_its_breach")
    with Worker(spec, device, timeout_s=60.0) as worker:
        for n in (8, 1 << 20):
            values = torch.arange(float(n))
            call = Call(args=(TensorArg(values),), slots=(OutputSlot((n,), torch.float32),))
            result = worker.run(Invocation(calls=(call,), return_inputs=(0,)))
            assert result.error == ""
            assert {(p.call, p.tensor) for p in result.placements} == {
                (0, "input 0"),
                (0, "output 0"),
            }
            assert torch.equal(result.calls[0].outputs[0], values * 2)
            (found,) = result.breaches
            assert (found.tensor, found.first_offset) == ("output 0", 4 * n)


def test_a_reply_whose_account_cannot_be_read_fails_the_invocation() -> None:
    from dataclasses import replace

    from kernelaudit.runner.auditor.observed import observe
    from kernelaudit.runner.boundary.shared import Region

    region = Region.create("test")
    try:
        region.grow(1 << 16)
        call = Call(args=(TensorArg(X),))
        invocation = Invocation(calls=(call,), return_inputs=(0,), arena=(0, 1 << 16))
        honest = InvocationResult(calls=())
        for garbage in (7, ("input 0",), None):
            failed = observe(invocation, replace(honest, placements=garbage), region, b"")
            assert failed.error_kind == "tampered" and failed.calls == ()
            assert "cannot check what the worker reported" in failed.error
    finally:
        region.close()


def _repeated(function: str, device: str, slots: bool) -> InvocationResult:
    """One call of `function` made three more times back to back for the auditor's clock,
    after a first invocation of it alone (in which a forger rebinds what it rebinds)."""
    out = (OutputSlot((8,), torch.float32),)
    call = Call(
        args=(TensorArg(X),),
        slots=out if slots else (),
        repeat=3,
        repeat_outputs=() if slots else out,
    )
    ref = parse_candidate(f"{FIXTURE}::{function}")
    with Worker(ref, device, timeout_s=60.0) as worker:
        alone = worker.run(Invocation(calls=(replace(call, repeat=0),), return_inputs=(0,)))
        assert alone.error == "" and alone.calls[0].repeats_read is False
        return worker.run(Invocation(calls=(call,), return_inputs=(0,)))


@pytest.mark.parametrize("slots", [True, False], ids=["destination", "returned"])
def test_the_calls_made_back_to_back_are_read_by_the_auditor(slots: bool, device: str) -> None:
    result = _repeated("honest" if slots else "honest_returning", device, slots)
    assert result.error == ""
    repeats = {p.tensor for p in result.placements if p.tensor.startswith("repeat")}
    assert repeats == {f"repeat {j} output 0" for j in range(3)}
    (outcome,) = result.calls
    assert outcome.repeats_read and outcome.repeats_unlike == ()


def test_calls_back_to_back_that_were_not_made_are_seen(device: str) -> None:
    result = _repeated("skips_its_repeats", device, slots=True)
    assert result.error == ""
    (outcome,) = result.calls
    assert outcome.repeats_read and outcome.repeats_unlike == (0, 1, 2)


def test_a_reply_cannot_claim_what_only_the_auditor_reads(device: str) -> None:
    # the candidate's first call rebinds the worker's loop: its reply says every repetition was
    # read and found right; the auditor's own reading of the arena says otherwise
    result = _repeated("claims_its_repeats_read", device, slots=True)
    (outcome,) = result.calls
    assert outcome.repeats_read and outcome.repeats_unlike == (0, 1, 2)


@pytest.mark.parametrize("made", [True, False], ids=["repeats", "base"])
def test_the_worker_learns_whether_to_repeat_only_after_the_call(made: bool, device: str) -> None:
    # the auditor's clock differences an invocation that repeats the call with one that does
    # not: a candidate that could tell them apart during its call could slow the base alone
    call = Call(
        args=(TensorArg(X),), slots=(OutputSlot((8,), torch.float32),), repeat=3, repeat_calls=made
    )
    ref = parse_candidate(f"{FIXTURE}::peeks_at_its_repeats")
    with Worker(ref, device, timeout_s=60.0) as worker:
        timed = worker.run(Invocation(calls=(call,), return_inputs=(0,)))
        after = worker.run(Invocation(calls=(replace(call, repeat=0),), return_inputs=(0,)))
    assert timed.error == "" and after.error == ""
    seen = timed.calls[0].outputs[0]
    assert seen[0].item() == 1.0
    assert seen[1].item() == 1.0  # told "repeat" either way: the decision was not yet sent
    # the call itself, its three repetitions if asked for, then the next invocation's call
    assert after.calls[0].outputs[0][0].item() == (5.0 if made else 2.0)
    assert timed.calls[0].repeats_read is made


def test_without_an_arena_no_repetition_counts_as_read() -> None:
    # where no arena was set aside (it would not fit), the auditor reads nothing: a reply's
    # claim to the contrary is dropped
    call = Call(args=(TensorArg(X),), slots=(OutputSlot((8,), torch.float32),), repeat=3)
    claimed = CallOutcome(outputs=(X * 2,), repeats_read=True)
    result = InvocationResult(calls=(claimed,))
    (outcome,) = observe(Invocation(calls=(call,)), result, None, b"").calls
    assert outcome.repeats_read is False
