"""Each case's truth and baseline, kept on the device they were computed on while they are judged.

A case's results are made on the GPU and copied to the host, where the case is kept for every
check that runs it again (`engine.executor`). Each comparison then copied them to the GPU
again: a float64 truth per result, per probe, per check that judged the case. In a profile of
a mid-sized audit on an H100 that was a tenth of the auditor's time.

Now the device tensor a host copy was made from is held beside it (`hold`), and a comparison
on that device takes it (`on`) instead of copying the host's again. What is held is bounded by
`most_bytes` (a thirty-second of the device's memory; the least recently used dropped first) and
lives no longer than its host copy: once a kept case is dropped, so is what is held for it.
Nothing held is ever written to: the host copy and the device copy hold the same bits (the host
copy is made from the held one), so a verdict does not depend on which a comparison used.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

import torch

from kernelaudit.host_copies import host_copy

SHARE = 32
"""What is held is at most the device's memory divided by this: the auditor keeps a quarter of
the device for its own work (`runner.limits.default_limits`), an eighth of it for kept draws
(`oracle.resident`), and the rest for the truth it computes and the comparisons it makes."""


class KeptResults:
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
        one (cast on the device if asked), else `value.to(where, dtype)`. Never write to what
        this returns: it may be the held copy itself, or `value`."""
        held = self._get(value, where)
        if held is None:
            return value.to(where, dtype or value.dtype)
        return held.to(dtype or held.dtype)

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


KEPT_RESULTS = KeptResults()
"""The process's device copies of its kept cases' results (`oracle.truth` holds them,
`oracle.compare` judges on them)."""


def copied_to_host(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A host copy of the device tensor `value` at `dtype`, the device's own copy at that
    dtype held beside it (`KEPT_RESULTS`); on the host, just a copy."""
    if value.device.type == "cpu":
        return value.detach().to(dtype=dtype, copy=True)
    try:
        # a copy of its own, whatever `value` is: the reference may write into what it
        # returned again (a buffer it keeps), and a view would hold all it is a view of;
        # contiguous, so that a large one comes to the host through the staging buffers
        # (`host_copies`) rather than page by page
        on_device = value.detach().to(dtype=dtype, copy=True, memory_format=torch.contiguous_format)
    except torch.cuda.OutOfMemoryError:
        KEPT_RESULTS.clear()
        torch.cuda.empty_cache()
        return value.detach().to("cpu", dtype, copy=True)
    host = host_copy(on_device)
    KEPT_RESULTS.hold(host, on_device)
    return host
