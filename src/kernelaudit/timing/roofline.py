"""The device's measured roofline, the least work a problem needs, and where a time sits
between them.

The roofline is measured, not taken from a data sheet (`timing.peaks`: memory bandwidth from a
large device-to-device copy and compute throughput from a square matmul per dtype). A time is
placed against the floor `max(flops / rate, bytes / bandwidth)`:
the fraction of the roofline it reaches, and whether it beats the floor by more than any real
kernel could, which is what a cached output or skipped work looks like.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from kernelaudit.errors import UsageError
from kernelaudit.timing.measure import format_seconds

FLOOR_SLACK = 0.5
"""A time under this fraction of the measured floor is physically impossible. The measured
roofline comes from cuBLAS and a copy kernel, which reach roughly 70-90% of the hardware's
peak, so a hand-written kernel may beat it by up to ~1.4x, never by 2x; caching or skipped work
beats it by far more."""

FASTER_PATHS = {"float32": ("tf32",)}
"""Other rates at which a dtype's arithmetic can be done. A float32 kernel may use TF32 tensor
cores (the numerics checks judge whether that is acceptable), so whether a time beats the
floor is judged against the fastest of them; the fraction of the roofline uses the dtype's own
rate."""

STEADY_SPREAD = 1.5
"""How far a measurement's median sample may sit above its fastest for its floor to fail a
kernel. Whatever else runs on the device only slows a sample, so the fastest is the peak; but
where most samples ran far slower, the device was disturbed throughout, the fastest may have
been slowed too, and a floor resting on it could stand above what the device reaches. A time
below such a floor is a note. On an idle H100 or H200 the medians sit within a few percent of
the fastest."""

_DTYPE_KEYS = {
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float32: "float32",
    torch.float64: "float64",
}


@dataclass(frozen=True)
class Roofline:
    """Measured peak rates of one device.

    flops_per_s: dtype name ("float16", "bfloat16", "float32", "tf32", "float64") -> FLOP/s.
    method: how the rates were measured, and where they were read from when cached.
    warm_cache_bytes: bytes a timed call may find in cache, left there by the call before it:
    none on CUDA (the L2 is flushed before every timed call), the largest cache on a CPU. Work
    up to this size has no memory floor.
    spread: each measurement's median sample over its fastest ("bandwidth", and each key of
    flops_per_s): how steady the device was while it was measured (`STEADY_SPREAD`); a
    measurement not listed is taken as steady.
    """

    device: str
    bandwidth_bytes_per_s: float
    flops_per_s: dict[str, float] = field(hash=False)
    method: str
    warm_cache_bytes: int = 0
    spread: dict[str, float] = field(default_factory=dict, hash=False)

    def unsteady(self, measurements: Iterable[str]) -> dict[str, float]:
        """Those of `measurements` whose spread is past `STEADY_SPREAD`, with their spread."""
        spread = {m: self.spread.get(m, 1.0) for m in measurements}
        return {m: s for m, s in spread.items() if not s <= STEADY_SPREAD}

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["flops_per_s"] = dict(self.flops_per_s)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Roofline:
        return cls(
            device=str(data["device"]),
            bandwidth_bytes_per_s=float(data["bandwidth_bytes_per_s"]),
            flops_per_s={str(k): float(v) for k, v in data["flops_per_s"].items()},
            method=str(data["method"]),
            warm_cache_bytes=int(data.get("warm_cache_bytes", 0)),
            spread={str(k): float(v) for k, v in data.get("spread", {}).items()},
        )


@dataclass(frozen=True)
class RooflinePosition:
    """Where a time sits against the roofline floor of its work.

    floor_s: max(compute_floor_s, memory_floor_s), at the dtype's own compute rate.
    fraction: floor_s / seconds (1.0 = at the measured roofline; inf for a zero time).
    bound: "memory" or "compute", whichever floor is higher.
    beats_floor: the time is under FLOOR_SLACK times the floor at the fastest rate the dtype
    can be computed at, measured steadily: no real kernel is that fast.
    below_unsteady: the time is under it, but a measurement the floor rests on was unsteady
    (`STEADY_SPREAD`): not a floor to fail a kernel on.
    """

    floor_s: float
    compute_floor_s: float
    memory_floor_s: float
    fraction: float
    bound: str
    beats_floor: bool
    text: str
    below_unsteady: bool = False

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["fraction"] = self.fraction if math.isfinite(self.fraction) else None
        return data


def derived_bytes(tensors: Iterable[object]) -> int:
    """The least memory traffic of a call: every distinct element of its inputs read once and
    of its outputs written once. Broadcast (stride-0) dimensions count once, a view passed
    twice counts once, non-tensors and non-strided layouts count nothing, so the result stays
    a lower bound."""
    seen: set[tuple[object, ...]] = set()
    total = 0
    for tensor in tensors:
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
            continue
        try:
            address = tensor.data_ptr()
        except (RuntimeError, NotImplementedError):
            address = 0  # no storage behind it (a fake or functional tensor): never deduplicated
        view = (address, tensor.dtype, tuple(tensor.shape), tensor.stride())
        if address and view in seen:
            continue
        seen.add(view)
        distinct = math.prod(
            size for size, stride in zip(tensor.shape, tensor.stride(), strict=True) if stride
        )
        total += (distinct if tensor.numel() else 0) * tensor.element_size()
    return total


def derived_flops(fn: Callable[..., object], args: Sequence[object]) -> int | None:
    """Floating-point operations of `fn(*args)` as torch's FLOP counter sees them (matmuls,
    convolutions, attention); None when it counts none, as for elementwise work, which is then
    judged on bytes alone. Runs `fn` once, without autograd."""
    # imported on first use: it brings in sympy, which the worker never needs
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        fn(*args)
    total = counter.get_total_flops()
    return int(total) if total else None


def measured_position(found: Mapping[str, Any], seconds: float) -> RooflinePosition | None:
    """Where `seconds` a call falls on the roofline a timed probe's measurements hold (`found`:
    its "roofline", "flops", "bytes" and "dtype"); None when no roofline was measured."""
    if "roofline" not in found:
        return None
    dtype = getattr(torch, found["dtype"])
    return position(seconds, found["flops"], found["bytes"], dtype, found["roofline"])


def position(
    seconds: float,
    flops: int | None,
    bytes_: int,
    dtype: torch.dtype | str,
    roofline: Roofline,
    slack: float = FLOOR_SLACK,
) -> RooflinePosition:
    """Place a time per call against the floor of its work on `roofline`. dtype is the dtype of
    the arithmetic (a torch.dtype, or a key of `roofline.flops_per_s` such as "tf32")."""
    if not seconds >= 0 or bytes_ < 0 or (flops is not None and flops < 0):
        raise UsageError(
            f"position: seconds={seconds}, flops={flops}, bytes_={bytes_} must not be negative"
        )
    if not 0 < slack <= 1:
        raise UsageError(f"position: slack={slack} must be in (0, 1]; the default is {FLOOR_SLACK}")
    key = dtype if isinstance(dtype, str) else _DTYPE_KEYS.get(dtype, str(dtype).rsplit(".")[-1])
    rate = roofline.flops_per_s.get(key)
    faster = [
        roofline.flops_per_s[k] for k in FASTER_PATHS.get(key, ()) if k in roofline.flops_per_s
    ]
    fastest = max([r for r in (rate, *faster) if r], default=None)
    # bytes a warm cache can serve are free: only the rest must cross the measured bandwidth
    memory_floor = max(0, bytes_ - roofline.warm_cache_bytes) / roofline.bandwidth_bytes_per_s
    compute_floor = flops / rate if flops and rate else 0.0
    floor = max(memory_floor, compute_floor)
    least = max(memory_floor, flops / fastest if flops and fastest else 0.0)
    # a zero time (all of it under the calibrated overhead) is infinitely fast unless no work
    fraction = floor / seconds if seconds > 0 else (math.inf if floor > 0 else 0.0)
    bound = "compute" if compute_floor > memory_floor else "memory"
    # the measurements the floor rests on, and how steadily each was measured
    resting = ["bandwidth"] if memory_floor > 0 else []
    if flops and fastest:
        resting += [k for k in (key, *FASTER_PATHS.get(key, ())) if k in roofline.flops_per_s]
    unsteady = roofline.unsteady(resting)
    below = seconds < slack * least
    beats = below and not unsteady

    work = f"{_si(bytes_, 'B')} at {_si(roofline.bandwidth_bytes_per_s, 'B/s')}"
    if flops and rate:
        arithmetic = f"{_si(flops, 'FLOP')} at {_si(rate, 'FLOP/s')} {key}"
        work = f"{arithmetic}; {work}" if bound == "compute" else f"{work}; {arithmetic}"
    elif flops:
        work += f"; no measured {key} rate, so its {_si(flops, 'FLOP')} are judged on bytes alone"
    where = f"the {bound}-bound floor of {format_seconds(floor)} on {roofline.device} ({work})"
    via = f", judged at the faster {FASTER_PATHS[key][0]} rate" if least < floor else ""
    if beats:
        widest = max((roofline.spread.get(m, 1.0) for m in resting), default=1.0)
        text = (
            f"{format_seconds(seconds)} beats {where}{via} by more than {1 / slack:.3g}x: no "
            "kernel does this work that fast on this device, so outputs were cached or work "
            f"was skipped (the floor rests on the fastest samples of measurements whose "
            f"medians were within {widest:.2f}x of them)."
        )
    elif below:
        said = ", ".join(f"{m} (median {s:.2f}x its fastest sample)" for m, s in unsteady.items())
        text = (
            f"{format_seconds(seconds)} is below {where}{via} by more than {1 / slack:.3g}x, "
            f"but the device was unsteady while its {said} was measured, past "
            f"{STEADY_SPREAD:g}x: a floor measured so may stand above what the device reaches."
        )
    elif least < floor and seconds < slack * floor:
        text = (
            f"{format_seconds(seconds)} is {fraction:.0%} of the roofline: {where}; faster than "
            f"{key} arithmetic allows, which only the {FASTER_PATHS[key][0]} rate explains."
        )
    else:
        text = f"{format_seconds(seconds)} is {fraction:.0%} of the roofline: {where}."
    return RooflinePosition(
        floor_s=floor,
        compute_floor_s=compute_floor,
        memory_floor_s=memory_floor,
        fraction=fraction,
        bound=bound,
        beats_floor=beats,
        text=text,
        below_unsteady=below and not beats,
    )


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"
