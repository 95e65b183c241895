"""The wire between the auditor and a worker: length-prefixed pickles with tensor bytes out of
band. Decoding builds only the protocol's dataclasses and plain CPU tensors, so a hostile
candidate that writes to the pipe cannot run code in the auditor."""

from __future__ import annotations

import io
import math
import pickle
import struct
from collections.abc import Callable
from typing import Any

import torch

from kernelaudit.runner import messages
from kernelaudit.runner.shared import SharedTensor
from kernelaudit.timing import kernels, measure

_U64 = struct.Struct(">Q")
_MAX_PIECES = 1 << 16


def _tensor_from_bytes(dtype: str, shape: tuple[int, ...], data: bytearray) -> torch.Tensor:
    kind = getattr(torch, dtype, None)
    if not isinstance(kind, torch.dtype):
        raise pickle.UnpicklingError(f"unknown tensor dtype {dtype!r}")
    # the shape is the sender's word: checked against the bytes that came before anything is
    # allocated for it
    if not isinstance(shape, tuple) or not all(type(n) is int and n >= 0 for n in shape):
        raise pickle.UnpicklingError(f"tensor shape {shape!r} is not a tuple of sizes")
    if not isinstance(data, bytearray) or len(data) != math.prod(shape) * kind.itemsize:
        raise pickle.UnpicklingError(f"tensor data does not match {dtype}{list(shape)}")
    if not data:
        return torch.empty(shape, dtype=kind)
    return torch.frombuffer(data, dtype=torch.uint8).view(kind).reshape(shape)


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: object) -> Any:
        if not isinstance(obj, torch.Tensor):
            return NotImplemented
        if obj.device.type != "cpu":
            raise ValueError(f"only CPU tensors cross the worker boundary, not {obj.device}")
        flat = obj.detach().contiguous().reshape(-1).view(torch.uint8)
        data = pickle.PickleBuffer(flat.numpy())
        dtype = str(obj.dtype).removeprefix("torch.")
        return _tensor_from_bytes, (dtype, tuple(obj.shape), data)


_ALLOWED = {
    **{
        ("kernelaudit.runner.messages", name): getattr(messages, name)
        for name in (
            "Load",
            "TensorArg",
            "OutputSlot",
            "Call",
            "Invocation",
            "GuardBreach",
            "CallOutcome",
            "InvocationResult",
            "OutputObject",
            "StateChange",
        )
    },
    **{
        (module.__name__, name): getattr(module, name)
        for module, names in ((measure, ("Timing",)), (kernels, ("KernelTime", "KernelProfile")))
        for name in names
    },
    (__name__, "_tensor_from_bytes"): _tensor_from_bytes,
}

_SHARED = (SharedTensor.__module__, "SharedTensor")
"""Allowed only on channels that carry shared memory (`decode(..., shared=True)`): the
training check's, whose auditor side resolves every place against a region it sized."""


class _Unpickler(pickle.Unpickler):
    def __init__(
        self, file: io.BytesIO, buffers: list[bytearray] | None = None, shared: bool = False
    ) -> None:
        super().__init__(file, buffers=buffers)
        self.shared = shared

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is not None:
            return found
        if self.shared and (module, name) == _SHARED:
            return SharedTensor
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"{module}.{name} may not cross the worker boundary")


def encode(message: object) -> list[memoryview]:
    """A message as the pieces written for it, in order: a header (the number of pieces that
    follow and each one's length), the pickle, then the bytes of each tensor in it.

    Tensor bytes travel beside the pickle (pickle protocol 5's out-of-band buffers), so they
    go from the tensor's memory to the pipe and from the pipe into the new tensor's memory
    without copies.
    """
    buffers: list[pickle.PickleBuffer] = []
    body = io.BytesIO()
    _Pickler(body, protocol=5, buffer_callback=buffers.append).dump(message)
    pieces = [body.getbuffer(), *(b.raw() for b in buffers)]
    header = struct.pack(f">{len(pieces) + 1}Q", len(pieces), *(p.nbytes for p in pieces))
    return [memoryview(header), *pieces]


class TooLarge(pickle.UnpicklingError):
    """A message announced more bytes than its reader allows; nothing of it was allocated."""


def decode(
    read: Callable[[int], bytearray], most_bytes: int | None = None, shared: bool = False
) -> object:
    """Read one message with `read` (which returns exactly n bytes), refusing anything that
    is not part of the protocol, and a message announcing more than `most_bytes` before any
    of it is allocated. `shared`: places in shared memory (`runner.shared.SharedTensor`) are
    part of this channel's protocol."""
    (count,) = _U64.unpack(read(_U64.size))
    if not 1 <= count <= _MAX_PIECES:
        raise pickle.UnpicklingError(f"a message of {count} pieces is not part of the protocol")
    lengths = struct.unpack(f">{count}Q", read(_U64.size * count))
    if most_bytes is not None and sum(lengths) > most_bytes:
        raise TooLarge(
            f"the worker announced a reply of {sum(lengths):,} bytes, more than the "
            f"{most_bytes:,} bytes this reply may take"
        )
    payload = read(lengths[0])
    buffers = [read(n) for n in lengths[1:]]
    return _Unpickler(io.BytesIO(payload), buffers, shared).load()
