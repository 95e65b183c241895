"""The wire between the auditor and a worker: length-prefixed pickles with tensor bytes out of
band. Decoding builds only the protocol's dataclasses and plain CPU tensors, so a hostile
candidate that writes to the pipe cannot run code in the auditor.

Where the two sides share a memory region (`runner.boundary.shared`), a large tensor's bytes go into
the sender's region instead of the pipe, the message naming its place, and the reader copies
them out of its own mapping while decoding: one copy on each side instead of the pipe's
system calls. The reader resolves a place only against a region it was given, through
`Region.view`'s checks, so a place outside the reader's own mapping is refused like any other
message that is not one."""

from __future__ import annotations

import functools
import io
import math
import pickle
import struct
from collections.abc import Callable
from typing import Any

import torch

from kernelaudit.runner.boundary import messages
from kernelaudit.runner.boundary.shared import Region, SharedTensor
from kernelaudit.timing import kernels, measure

_U64 = struct.Struct(">Q")
_MAX_PIECES = 1 << 16
REGION_LEAST_BYTES = 1 << 16
"""Tensors smaller than this travel in the pipe even where there is a region."""


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


def _tensor_from_region(offset: int, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """What a place in the sender's region pickles to; a reader with a region resolves it
    (`_Unpickler.find_class`), one without refuses it."""
    raise pickle.UnpicklingError("a tensor in shared memory where this channel has none")


def _taken(
    region: Region, views: bool, offset: int, dtype: str, shape: tuple[int, ...]
) -> torch.Tensor:
    place = SharedTensor(offset, dtype, shape)
    try:
        return region.view(place) if views else region.take(place, "cpu")
    except ValueError as error:
        raise pickle.UnpicklingError(f"not a tensor in the shared region: {error}") from None


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, region: Region | None, **options: Any) -> None:
        super().__init__(file, protocol=5, **options)
        self.region = region
        self.used = 0
        """Bytes of the region this message's tensors take so far."""

    def reducer_override(self, obj: object) -> Any:
        if not isinstance(obj, torch.Tensor):
            return NotImplemented
        if obj.device.type != "cpu":
            raise ValueError(f"only CPU tensors cross the worker boundary, not {obj.device}")
        dtype = str(obj.dtype).removeprefix("torch.")
        if self.region is not None and obj.nbytes >= REGION_LEAST_BYTES:
            place = self.region.put_at(obj, self.used)
            if place is not None:
                self.used = place.offset + obj.nbytes
                return _tensor_from_region, (place.offset, dtype, tuple(obj.shape))
        flat = obj.detach().contiguous().reshape(-1).view(torch.uint8)
        data = pickle.PickleBuffer(flat.numpy())
        return _tensor_from_bytes, (dtype, tuple(obj.shape), data)


_ALLOWED = {
    **{
        ("kernelaudit.runner.boundary.messages", name): getattr(messages, name)
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
            "Placement",
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
        self,
        file: io.BytesIO,
        buffers: list[bytearray] | None = None,
        shared: bool = False,
        region: Region | None = None,
        views: bool = False,
    ) -> None:
        super().__init__(file, buffers=buffers)
        self.shared = shared
        self.region = region
        self.views = views

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is not None:
            return found
        if (module, name) == (__name__, "_tensor_from_region"):
            # without a region of its own, the place is refused when the message is built
            region = self.region
            if region is None:
                return _tensor_from_region
            return functools.partial(_taken, region, self.views)
        if self.shared and (module, name) == _SHARED:
            return SharedTensor
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"{module}.{name} may not cross the worker boundary")


def encode(message: object, region: Region | None = None) -> list[memoryview]:
    """A message as the pieces written for it, in order: a header (the number of pieces that
    follow and each one's length), the pickle, then the bytes of each tensor in it.

    Tensor bytes travel beside the pickle (pickle protocol 5's out-of-band buffers), so they
    go from the tensor's memory to the pipe and from the pipe into the new tensor's memory
    without copies. With a `region`, tensors of at least `REGION_LEAST_BYTES` go into it
    instead, from its start, as many as fit; it must stay unwritten until the reader has
    decoded the message.
    """
    buffers: list[pickle.PickleBuffer] = []
    body = io.BytesIO()
    _Pickler(body, region, buffer_callback=buffers.append).dump(message)
    pieces = [body.getbuffer(), *(b.raw() for b in buffers)]
    header = struct.pack(f">{len(pieces) + 1}Q", len(pieces), *(p.nbytes for p in pieces))
    return [memoryview(header), *pieces]


class TooLarge(pickle.UnpicklingError):
    """A message announced more bytes than its reader allows; nothing of it was allocated."""


def decode(
    read: Callable[[int], bytearray],
    most_bytes: int | None = None,
    shared: bool = False,
    region: Region | None = None,
    views: bool = False,
) -> object:
    """Read one message with `read` (which returns exactly n bytes), refusing anything that
    is not part of the protocol, and a message announcing more than `most_bytes` before any
    of it is allocated. `shared`: places in shared memory (`runner.boundary.shared.SharedTensor`)
    are part of this channel's protocol. `region`: the reader's mapping of the region the sender
    put tensors in (`encode`), which each such tensor is copied out of; with `views`, each is
    a view into the region instead, valid until the sender writes the region again (the
    worker's side: the auditor writes it only with the next invocation)."""
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
    return _Unpickler(io.BytesIO(payload), buffers, shared, region, views).load()
