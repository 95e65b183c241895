"""Contention for races to show under: other kernels occupying the device's SMs while the
candidate runs, unrelated work queued ahead of the call on the caller's stream, and the
bit-for-bit comparison of what a contended call produced with what the call produced alone.

A race between a kernel's blocks (a lock released before the data it guards is written, a
flag read before the write it announces lands) shows only when the blocks run in an order or
at a pace the kernel did not expect. Alone on an idle GPU a kernel's blocks are placed the same
way run after run; with another stream's blocks competing for the SMs and the memory system,
placement and timing change from run to run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

ELEMENTS_PER_SM = 1 << 16
"""Scratch elements per SM: one in-place pass over them launches hundreds of blocks per SM,
so each pass keeps every SM busy for several waves."""
_CALIBRATION_PASSES = 4
_MIN_PASSES = 2
_MAX_PASSES = 4000
_LONGEST_S = 0.02
"""The noise of one call lasts at most this long: races show in how blocks are first placed,
and a long call would otherwise cost as much again under noise."""
_QUEUED_S = 0.005
"""Work queued ahead of a call lasts at least this long: longer than a candidate takes to
launch on a stream of its own, so such a launch starts before the queue has drained."""


class Noise:
    """In-place passes over a scratch buffer, launched on a side stream of their own."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        self.scratch = torch.ones(sms * ELEMENTS_PER_SM, dtype=torch.float32, device=device)
        self.stream = torch.cuda.Stream(device)
        self.pass_s = self._time_one_pass()

    @property
    def nbytes(self) -> int:
        return self.scratch.numel() * self.scratch.element_size()

    def launch(self, duration_s: float) -> int:
        """Queue passes lasting about `duration_s` (bounded) on the side stream, starting
        once the work queued so far on the current stream is done; returns how many."""
        wanted = min(max(duration_s, 0.0), _LONGEST_S)
        passes = min(max(math.ceil(wanted / self.pass_s), _MIN_PASSES), _MAX_PASSES)
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            for _ in range(passes):
                # negation is exact: the scratch never overflows however often it runs
                self.scratch.neg_()
        return passes

    def queue_ahead(self, inputs: Sequence[torch.Tensor], duration_s: float) -> int:
        """Leave the inputs' true values pending behind unrelated work on the current stream:
        each input (but an expanded view, whose elements share memory) is overwritten (NaN
        for floating point, zeros otherwise) and the device synchronised, then passes over the
        scratch lasting about `duration_s` (at least `_QUEUED_S`) and the copies of the true
        values are queued on the current stream. Returns how many kernels were queued ahead
        of the inputs' values."""
        stream = torch.cuda.current_stream(self.device)
        inputs = [t for t in inputs if _elementwise_writable(t)]
        staged = [t.clone() for t in inputs]
        for tensor in inputs:
            tensor.fill_(math.nan if tensor.is_floating_point() or tensor.is_complex() else 0)
        torch.cuda.synchronize(self.device)
        wanted = min(max(duration_s, _QUEUED_S), _LONGEST_S)
        passes = min(max(math.ceil(wanted / self.pass_s), _MIN_PASSES), _MAX_PASSES)
        with torch.cuda.stream(stream):
            for _ in range(passes):
                self.scratch.neg_()
            for tensor, value in zip(inputs, staged, strict=True):
                tensor.copy_(value)
        for value in staged:
            value.record_stream(stream)  # freed only once the queued copies have run
        return passes

    def _time_one_pass(self) -> float:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            self.scratch.neg_()
            start.record()
            for _ in range(_CALIBRATION_PASSES):
                self.scratch.neg_()
            end.record()
        end.synchronize()
        return max(start.elapsed_time(end) / 1000 / _CALIBRATION_PASSES, 1e-6)


def _elementwise_writable(tensor: torch.Tensor) -> bool:
    """Whether every element has memory of its own (no expanded, stride-0 dimension), so the
    tensor can be overwritten and restored element by element."""
    dims = zip(tensor.shape, tensor.stride(), strict=True)
    return all(stride != 0 or size <= 1 for size, stride in dims)


def bit_mismatches(
    outputs: Sequence[object], alone: Sequence[object], runner: int
) -> list[tuple[int, int, int, int, float]]:
    """(runner, output, differing elements, flat index of the first, largest absolute
    difference) for each output whose bits differ from the same output in `alone`. Outputs
    that are not plain tensors of the same shape and dtype are left to other checks."""
    found = []
    for k, (ours, theirs) in enumerate(zip(outputs, alone, strict=False)):
        if not _comparable(ours, theirs):
            continue
        assert isinstance(ours, torch.Tensor) and isinstance(theirs, torch.Tensor)
        differ = _differing(ours, theirs)
        count = int(differ.sum())
        if not count:
            continue
        flat = differ.reshape(-1)
        first = int(flat.nonzero()[0, 0])
        gap = (_wide(ours) - _wide(theirs)).abs().reshape(-1)[flat]
        largest = float(gap.nan_to_num(nan=math.inf).max())
        found.append((runner, k, count, first, largest))
    return found


def _comparable(ours: object, theirs: object) -> bool:
    return (
        type(ours) is torch.Tensor
        and type(theirs) is torch.Tensor
        and ours.layout == torch.strided
        and theirs.layout == torch.strided
        and ours.device.type != "meta"
        and ours.shape == theirs.shape
        and ours.dtype == theirs.dtype
        and ours.device == theirs.device
        and ours.numel() > 0
    )


def _wide(tensor: torch.Tensor) -> torch.Tensor:
    wide = torch.complex128 if tensor.dtype.is_complex else torch.float64
    return tensor.detach().to(wide)


def _differing(ours: torch.Tensor, theirs: torch.Tensor) -> torch.Tensor:
    """Elementwise: whether the two elements' bytes differ (NaN payloads and signed zeros
    included)."""
    width = ours.element_size()
    a = ours.detach().contiguous().reshape(-1).view(torch.uint8).reshape(-1, width)
    b = theirs.detach().contiguous().reshape(-1).view(torch.uint8).reshape(-1, width)
    return (a != b).any(dim=1).reshape(ours.shape)
