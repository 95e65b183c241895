"""The channel between the worker and the auditor: tensors come through as they were sent,
and what a worker announces is checked against what it sent before anything is allocated."""

from __future__ import annotations

import io
import pickle

import pytest
import torch

from kernelaudit.runner import wire
from kernelaudit.runner.messages import CallOutcome
from kernelaudit.runner.shared import SharedTensor


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
        decoded(shared=False)  # the worker's channel: its auditor resolves no places
