"""The channel between the worker and the auditor: tensors come through as they were sent,
and what a worker announces is checked against what it sent before anything is allocated."""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Iterator

import pytest
import torch

from kernelaudit.runner.boundary import wire
from kernelaudit.runner.boundary.messages import CallOutcome
from kernelaudit.runner.boundary.shared import Region, SharedTensor


def _through(message: object) -> object:
    stream = io.BytesIO(b"".join(bytes(piece) for piece in wire.encode(message)))
    return wire.decode(lambda count: bytearray(stream.read(count)))


class _Announces:
    """What a forged reply pickles to: a tensor of a huge shape, with four bytes behind it."""

    def __init__(self, shape: object) -> None:
        self.shape = shape

    def __reduce__(self) -> tuple:
        return wire._tensor_from_bytes, ("float32", self.shape, bytearray(4))


def test_tensors_cross_the_channel_bit_for_bit() -> None:
    sent = CallOutcome(outputs=(torch.randn(3, 5).t(), torch.empty(0, 2)))
    got = _through(sent)
    assert isinstance(got, CallOutcome)
    assert torch.equal(got.outputs[0], sent.outputs[0])
    assert got.outputs[1].shape == (0, 2)


def test_a_tensor_two_calls_share_crosses_once() -> None:
    # the calls of one case hand the worker the same input tensors: the message carries their
    # bytes once (what a probe's room counts for the worker's copy, `engine.host_memory`)
    from kernelaudit.runner.boundary.messages import Call, Invocation, TensorArg

    weights = torch.randn(256, 1024)
    one = Invocation(calls=(Call(args=(TensorArg(weights),)),))
    two = Invocation(calls=(Call(args=(TensorArg(weights),)), Call(args=(TensorArg(weights),))))
    sizes = [sum(len(piece) for piece in wire.encode(message)) for message in (one, two)]
    assert sizes[1] - sizes[0] < weights.nbytes // 100
    got = _through(two)
    assert isinstance(got, Invocation)
    first, second = (call.args[0].values for call in got.calls)
    assert first is second and torch.equal(first, weights)


@pytest.mark.parametrize("shape", [(1 << 40, 1 << 20), (-4,), ("4",), [1]])
def test_a_shape_that_its_bytes_do_not_fill_is_refused_before_allocating(shape: object) -> None:
    stream = io.BytesIO()
    pickle.Pickler(stream, protocol=5).dump(_Announces(shape))
    with pytest.raises(pickle.UnpicklingError, match="tensor"):
        wire._Unpickler(io.BytesIO(stream.getvalue())).load()


def test_places_in_shared_memory_cross_only_channels_that_carry_it() -> None:
    place = SharedTensor(0, "float32", (4,))
    pieces = b"".join(bytes(p) for p in wire.encode(("result", place)))

    def decoded(shared: bool) -> object:
        stream = io.BytesIO(pieces)
        return wire.decode(lambda count: bytearray(stream.read(count)), shared=shared)

    assert decoded(shared=True) == ("result", place)
    with pytest.raises(pickle.UnpicklingError, match="may not cross"):
        decoded(shared=False)  # the worker's: its places cross only as tensors in its region


Pair = tuple[Region, Region]


@pytest.fixture
def pair() -> Iterator[Pair]:
    """The auditor's mapping of a 4 MiB region it sized, and a worker's mapping of the same
    file."""
    auditor = Region.create("test-results")
    auditor.grow(1 << 22)
    worker = Region(os.dup(auditor.fd))
    yield auditor, worker
    for region in (worker, auditor):
        region.close()


def _pipe_bytes(pieces: list[memoryview]) -> bytes:
    return b"".join(bytes(piece) for piece in pieces)


def test_large_tensors_cross_in_the_region_and_small_ones_in_the_pipe(pair: Pair) -> None:
    auditor, worker = pair
    sent = CallOutcome(outputs=(torch.randn(512, 512).t(), torch.arange(10)))
    pieces = _pipe_bytes(wire.encode(sent, worker))
    assert len(pieces) < wire.REGION_LEAST_BYTES  # the 1 MiB output went into the region
    stream = io.BytesIO(pieces)
    got = wire.decode(lambda count: bytearray(stream.read(count)), region=auditor)
    assert isinstance(got, CallOutcome)
    assert torch.equal(got.outputs[0], sent.outputs[0])
    assert torch.equal(got.outputs[1], sent.outputs[1])
    worker.put_at(torch.zeros(512, 512), 0)  # the region's next use leaves the decoded copy be
    assert torch.equal(got.outputs[0], sent.outputs[0])


def test_tensors_past_what_the_region_holds_cross_in_the_pipe(pair: Pair) -> None:
    auditor, worker = pair
    sent = CallOutcome(outputs=(torch.randn(1 << 20), torch.randn(1 << 19)))  # 4 MiB, 2 MiB
    pieces = _pipe_bytes(wire.encode(sent, worker))
    assert (1 << 21) <= len(pieces) < (1 << 22)  # the second did not fit
    stream = io.BytesIO(pieces)
    got = wire.decode(lambda count: bytearray(stream.read(count)), region=auditor)
    assert isinstance(got, CallOutcome)
    assert all(torch.equal(a, b) for a, b in zip(got.outputs, sent.outputs, strict=True))


def test_a_tensor_placed_past_the_readers_own_mapping_is_refused(pair: Pair) -> None:
    """A worker that grows the file itself and places a tensor past the size the auditor chose
    makes its reply one that is not a message."""
    auditor, worker = pair
    os.ftruncate(worker.fd, 1 << 24)
    worker.refresh()
    pieces = _pipe_bytes(wire.encode(CallOutcome(outputs=(torch.randn(3 << 20),)), worker))
    stream = io.BytesIO(pieces)
    with pytest.raises(pickle.UnpicklingError, match="runs past the region's 4,194,304 bytes"):
        wire.decode(lambda count: bytearray(stream.read(count)), region=auditor)


def test_a_channel_without_a_region_refuses_a_tensor_placed_in_one(pair: Pair) -> None:
    _, worker = pair
    stream = io.BytesIO(
        _pipe_bytes(wire.encode(CallOutcome(outputs=(torch.randn(1 << 16),)), worker))
    )
    with pytest.raises(pickle.UnpicklingError, match="shared memory where this channel has none"):
        wire.decode(lambda count: bytearray(stream.read(count)))


def test_a_reader_taking_views_reads_the_region_itself(pair: Pair) -> None:
    """The worker's side: the invocation's tensors are views into the region, not copies."""
    auditor, worker = pair
    sent = CallOutcome(outputs=(torch.randn(1 << 16),))
    stream = io.BytesIO(_pipe_bytes(wire.encode(sent, auditor)))
    got = wire.decode(lambda count: bytearray(stream.read(count)), region=worker, views=True)
    assert isinstance(got, CallOutcome)
    assert torch.equal(got.outputs[0], sent.outputs[0])
    auditor.put_at(torch.zeros(1 << 16), 0)
    assert not got.outputs[0].any()
