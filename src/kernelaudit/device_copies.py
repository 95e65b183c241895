"""Device copies of host tensors the auditor keeps, held while those host tensors live.

Two things the auditor keeps on the host are compared on the GPU again and again:

- each kept case's truth and baseline (`engine.executor` keeps a case for every check that
  runs it again): every comparison copied them to the GPU anew, a float64 truth per result,
  per probe, per check that judged the case; in a profile of a mid-sized audit on an H100
  that was a tenth of the auditor's time. Now the device tensor a host copy was made from is
  held beside it (`oracle.kept_results.copied_to_host`), and a comparison on that device takes
  it instead;
- each case's inputs as the auditor gave them to a call: after every call it compares the
  inputs the call may not write, as they lie in the memory it lent the worker, with its own
  values (`runner.auditor.observed`), and copied those from pageable host memory for every call of
  every probe. In a sampled audit of a decoder layer on an H200 that was a fifth of the
  auditor's main thread. Now the first comparison's copy is held (`copied`) for the next.

What is held is bounded by `most_bytes` (a sixteenth of the device's memory; the least
recently used dropped first) and lives no longer than its host tensor: once a kept case is
dropped, so is what is held for it. Nothing held is ever written to, and it is the auditor's
own memory, which no candidate's process can reach: the host tensor and its device copy hold
the same bits, so a verdict does not depend on which a comparison used.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

import torch

SHARE = 16
"""What is held is at most the device's memory divided by this: the auditor keeps a quarter of
the device for its own work (`runner.auditor.limits.default_limits`), an eighth of it for kept draws
(`oracle.resident`), and the rest for the truth it computes and the comparisons it makes."""


class DeviceCopies:
    """Device copies of host tensors, by the host tensor's identity and the device."""

    def __init__(self, most_bytes: int | None = None) -> None:
        self.most_bytes = most_bytes
        """The bytes held at most; None: `SHARE` of the memory of the device held on."""
        self._held: OrderedDict[tuple[int, torch.device], torch.Tensor] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def held_bytes(self) -> int:
        return self._bytes

    def hold(self, host: torch.Tensor, copy: torch.Tensor) -> None:
        """Keep `copy` (on a device other than `host`'s, the same values at the same dtype
        and shape) as `host`'s copy there, while `host` lives and the room allows."""
        if copy.device == host.device or copy.dtype != host.dtype or copy.shape != host.shape:
            raise ValueError("a held copy has the host tensor's dtype and shape, on another device")
        where = _device(copy.device)
        size = _bytes(copy)
        most = self._most(where)
        if size > most:
            return
        key = (id(host), where)
        with self._lock:
            self._pop(key)
            while self._held and self._bytes + size > most:
                self._pop(next(iter(self._held)))
            self._held[key] = copy
            self._bytes += size
        weakref.finalize(host, self._drop, key)

    def on(
        self, value: torch.Tensor, where: torch.device, dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        """`value` on `where` at `dtype` (its own when None): the copy held there when there is
        one (cast on the device if asked), else `moved(value, where, dtype)`. Never write to what
        this returns: it may be the held copy itself, or `value`."""
        held = self._get(value, where)
        if held is None:
            return moved(value, where, dtype)
        return held.to(dtype or held.dtype)

    def copied(self, value: torch.Tensor, where: torch.device) -> torch.Tensor:
        """`value` on `where`: the copy held there, else one made now and held for the next
        call (while `value` lives and the room allows). Never write to what this returns."""
        if value.device == _device(where):
            return value
        held = self._get(value, where)
        if held is not None:
            return held
        copy = value.detach().to(where, copy=True)
        self.hold(value, copy)
        return copy

    def _get(self, value: torch.Tensor, where: torch.device) -> torch.Tensor | None:
        if value.device == where:
            return None
        key = (id(value), _device(where))
        with self._lock:
            held = self._held.get(key)
            if held is not None:
                self._held.move_to_end(key)
        return held

    def clear(self) -> None:
        """Give back everything held (the device is needed for something else)."""
        with self._lock:
            self._held.clear()
            self._bytes = 0

    def _drop(self, key: tuple[int, torch.device]) -> None:
        with self._lock:
            self._pop(key)

    def _pop(self, key: tuple[int, torch.device]) -> None:
        dropped = self._held.pop(key, None)
        if dropped is not None:
            self._bytes -= _bytes(dropped)

    def _most(self, device: torch.device) -> int:
        return share_of(device, SHARE) if self.most_bytes is None else self.most_bytes


_EXACTLY_WIDENED = (torch.bool, torch.uint8, torch.int8, torch.int16)
"""Integer dtypes every value of which a wider floating dtype holds exactly (a 16-bit
integer's in float32's 24 bits; not an int32's or int64's in every case)."""


def moved(
    value: torch.Tensor,
    where: torch.device | str,
    dtype: torch.dtype | None = None,
    copy: bool = False,
) -> torch.Tensor:
    """`value` on `where` at `dtype` (its own when None), as `value.to(where, dtype, copy=copy)`
    gives it, but a host tensor going to a device at a wider floating dtype crosses the bus at
    its own and is widened there, where the widening is exact (from a floating dtype, or from
    booleans and integers of at most 16 bits: `_EXACTLY_WIDENED`), so that the values are the
    same either way.

    Asked for both at once, torch casts on the host first (ATen's copies between a CPU and a
    GPU convert on the CPU), into fresh pageable memory, then sends the wider bytes from
    there: a bfloat16 result judged in float64 made four times the traffic, none of it from
    page-locked memory, and that cast was the largest single line of the auditor's main
    thread in sampled audits of SOL-ExecBench problems on an H200 (13% and 22%:
    docs/benchmarks.md, "Casts on the device"). A narrowing cast stays on the host, where it
    makes fewer bytes to send."""
    target = torch.device(where)
    wanted = dtype or value.dtype
    exact = value.dtype.is_floating_point or value.dtype.is_complex
    exact = exact or value.dtype in _EXACTLY_WIDENED
    widening = (wanted.is_floating_point or wanted.is_complex) and exact
    widening = widening and value.element_size() < wanted.itemsize
    if widening and value.device.type == "cpu" and target.type != "cpu":
        return value.to(target).to(wanted)  # both steps make new tensors: a copy either way
    return value.to(target, wanted, copy=copy)


def share_of(device: torch.device, share: int) -> int:
    """The device's memory divided by `share`; nothing for a device that is not a GPU."""
    if device.type != "cuda":
        return 0
    return torch.cuda.get_device_properties(device).total_memory // share


def _device(device: torch.device) -> torch.device:
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _bytes(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().nbytes()


DEVICE_COPIES = DeviceCopies()
"""The process's device copies of its kept cases' results (`oracle.kept_results` holds them,
`oracle.compare` judges on them) and of the inputs it gave calls (`runner.auditor.observed`)."""
