"""Wall time of a call on a device, measured so that a kernel cannot look faster than it is.

On CUDA every repetition runs the same protocol: flush the L2 cache on the current stream,
record a start event, make the call, wait for the whole device (every stream, so work pushed to
a side stream is charged), record an end event and wait for it. The cost of that protocol around
an empty call is measured alongside the calls (an empty call after each of them, besides a few
before) and its median subtracted: calibrated once, it carried whatever else the host ran at
that moment into every later timing, and a busy moment there made a correct kernel of a few
microseconds time at zero. Elsewhere the host clock is read around the call with the same
warm-up and repetitions.

The clock, the device-wide wait and the event class are captured when this module is imported,
so a candidate that replaces `time.perf_counter` or `torch.cuda.synchronize` afterwards does not
change what is measured. Callers that hold references saved even earlier (the worker does) pass
them as `sync` and `clock`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from kernelaudit.errors import UsageError

_SYNC = torch.cuda.synchronize
_EVENT = torch.cuda.Event
_RECORD = torch.cuda.Event.record
_WAIT_EVENT = torch.cuda.Event.synchronize
_ELAPSED_MS = torch.cuda.Event.elapsed_time
_CURRENT_STREAM = torch.cuda.current_stream
_ON_STREAM = torch.cuda.stream
_CURRENT_DEVICE = torch.cuda.current_device
_PROPERTIES = torch.cuda.get_device_properties
_PERF = time.perf_counter

CALIBRATION_CALLS = 16
"""Empty calls made before the timed ones; with the one after each timed call (at least
`min_repetitions`), their median protocol cost is subtracted from every sample: enough that
the median is stable to a fraction of a microsecond, few enough to cost a few milliseconds."""

FEWEST_REPETITIONS = 5
"""Timed calls that suffice, below `min_repetitions`, once the timed loop has run for
`ENOUGH_SECONDS`: a call of half a second or more (a recurrence stepped from Python, an
interpreted kernel) has a median that five samples settle, and ten of them cost seconds."""

ENOUGH_SECONDS = 2.0
"""Wall time of timed calls after which `FEWEST_REPETITIONS` suffice."""

FALLBACK_L2_BYTES = 128 * 2**20
"""Assumed L2 size when the device does not report one: larger than the L2 of any current GPU
that reports none, so the flush still evicts everything."""

_FLUSH_BUFFERS: dict[int, torch.Tensor] = {}


@dataclass(frozen=True)
class Timing:
    """What `time_calls` measured, in seconds per call.

    median_s, p10_s, p90_s: statistics of `samples_s` (linear interpolation between ranks).
    method: how the samples were taken, in words a report can print as is.
    overhead_s: the calibrated protocol cost subtracted from every raw sample (floored at 0).
    """

    median_s: float
    p10_s: float
    p90_s: float
    repetitions: int
    warmup: int
    method: str
    overhead_s: float
    samples_s: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["samples_s"] = list(self.samples_s)
        return data


def time_calls(
    call: Callable[[], object],
    device: torch.device | str,
    *,
    warmup: int = 3,
    min_repetitions: int = 10,
    max_repetitions: int = 200,
    target_seconds: float = 0.5,
    flush_l2: bool = True,
    on_output: Callable[[object, int], None] | None = None,
    sync: Callable[[], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> Timing:
    """Time `call()` on `device`: `warmup` untimed calls, then at least `min_repetitions` timed
    ones, adding more until `target_seconds` of wall time have passed in the timed loop or
    `max_repetitions` is reached. Calls so long that the timed loop runs `ENOUGH_SECONDS`
    before `min_repetitions` stop at `FEWEST_REPETITIONS` (never more than `min_repetitions`).

    on_output(result, repetition) runs after each timed repetition, outside the timed region:
    the place to check or fingerprint what the call returned.
    sync: a zero-argument callable that waits for all work on the device (default: the
    `torch.cuda.synchronize` captured at import; nothing on CPU).
    clock: seconds as a float (default: the `time.perf_counter` captured at import); reads the
    host-clock samples and the wall-time budget.
    flush_l2: on CUDA, overwrite a buffer twice the L2 size before each call so every call
    starts with a cold cache, as it does in a real model; the flush also keeps the device busy
    while the call's first launch is issued, so the launch latency of the first kernel is not
    charged.
    """
    _check_counts(warmup, min_repetitions, max_repetitions, target_seconds)
    device = as_device(device)
    clock = _PERF if clock is None else clock
    wait = (lambda: synchronize(device)) if sync is None else sync
    if device.type == "cuda":
        protocol = _cuda_protocol(device, flush_l2, wait)
    else:
        protocol = _host_protocol(wait, clock)
    for _ in range(warmup):
        protocol(call)
    empty = [protocol(_noop)[0] for _ in range(CALIBRATION_CALLS)]
    raws: list[float] = []
    began = clock()
    while True:
        raw, result = protocol(call)
        raws.append(raw)
        if on_output is not None:
            on_output(result, len(raws) - 1)
        del result
        # after the outputs are looked at: no more time for work the call left behind
        empty.append(protocol(_noop)[0])
        if len(raws) >= max_repetitions:
            break
        elapsed = clock() - began
        if len(raws) >= min_repetitions and elapsed >= target_seconds:
            break
        if len(raws) >= min(FEWEST_REPETITIONS, min_repetitions) and elapsed >= ENOUGH_SECONDS:
            break

    overhead = max(percentile(sorted(empty), 50), 0.0)
    samples = [max(raw - overhead, 0.0) for raw in raws]
    ordered = sorted(samples)
    return Timing(
        median_s=percentile(ordered, 50),
        p10_s=percentile(ordered, 10),
        p90_s=percentile(ordered, 90),
        repetitions=len(samples),
        warmup=warmup,
        method=_describe(device, flush_l2, warmup, overhead, len(empty)),
        overhead_s=overhead,
        samples_s=tuple(samples),
    )


def flush_l2_cache(device: torch.device) -> None:
    """Overwrite a buffer of twice the device's L2 size on the current stream, evicting whatever
    an earlier call left in the cache. The buffer is allocated once per device and reused."""
    index = _CURRENT_DEVICE() if device.index is None else device.index
    buffer = _FLUSH_BUFFERS.get(index)
    if buffer is None:
        buffer = torch.empty(l2_bytes(device) * 2 // 4, dtype=torch.int32, device=device)
        _FLUSH_BUFFERS[index] = buffer
    buffer.zero_()


def l2_bytes(device: torch.device) -> int:
    """The device's L2 cache size in bytes, as the driver reports it."""
    reported = getattr(_PROPERTIES(device), "L2_cache_size", 0)
    return int(reported) if reported and reported > 0 else FALLBACK_L2_BYTES


def synchronize(device: torch.device) -> None:
    """Wait for all work on every stream of `device` (nothing to wait for on CPU).

    Other accelerators' `synchronize` is looked up when called: only the CUDA one is captured.
    """
    if device.type == "cuda":
        _SYNC(device)
    elif device.type != "cpu":
        getattr(torch, device.type).synchronize(device)


def as_device(device: torch.device | str) -> torch.device:
    """`device` as a torch.device with an index on CUDA; a sentence naming it when unusable."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise UsageError(
            f"device {device!r} is not a torch device ({error}); pass 'cpu', 'cuda' or 'cuda:N'"
        ) from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(
                f"device {device!r} asks for CUDA, which this machine does not have; "
                "pass device='cpu' or run on a machine with a CUDA GPU"
            )
        if resolved.index is None:
            resolved = torch.device("cuda", torch.cuda.current_device())
    return resolved


def percentile(ordered: list[float], q: float) -> float:
    """The q-th percentile of sorted values, interpolating linearly between neighbouring ranks."""
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def format_seconds(seconds: float) -> str:
    """A duration with a unit a person reads at a glance: 812 ns, 41.3 us, 2.15 ms, 1.20 s."""
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def _cuda_protocol(
    device: torch.device, flush_l2: bool, wait: Callable[[], None]
) -> Callable[[Callable[[], object]], tuple[float, object]]:
    stream = _CURRENT_STREAM(device)
    start = _EVENT(enable_timing=True)
    end = _EVENT(enable_timing=True)

    def timed(call: Callable[[], object]) -> tuple[float, object]:
        if flush_l2:
            # on the stream the events are recorded on, even if an earlier call left another
            # stream current, so the start event is ordered after the flush
            with _ON_STREAM(stream):
                flush_l2_cache(device)
        _RECORD(start, stream)
        result = call()
        wait()
        _RECORD(end, stream)
        _WAIT_EVENT(end)
        return _ELAPSED_MS(start, end) / 1e3, result

    return timed


def _host_protocol(
    wait: Callable[[], None], clock: Callable[[], float]
) -> Callable[[Callable[[], object]], tuple[float, object]]:
    def timed(call: Callable[[], object]) -> tuple[float, object]:
        began = clock()
        result = call()
        wait()
        return clock() - began, result

    return timed


def _describe(
    device: torch.device, flush_l2: bool, warmup: int, overhead: float, empty: int
) -> str:
    subtracted = (
        f"{format_seconds(overhead)} of protocol cost (median of {empty} empty calls, one "
        "after each timed call) subtracted from each sample"
    )
    if device.type != "cuda":
        return f"host clock around each call on {device}; {warmup} warm-up calls; {subtracted}"
    if flush_l2:
        size = l2_bytes(device)
        flush = (
            f"L2 flushed before each call by writing {size * 2 / 2**20:.0f} MiB "
            f"(twice the {size / 2**20:.0f} MiB L2) on the current stream; "
        )
    else:
        flush = "L2 not flushed (warm cache) and first-launch latency charged; "
    return (
        f"CUDA events on {device}; {flush}device-wide synchronize before the end event, so "
        f"work on every stream is charged; {warmup} warm-up calls; {subtracted}"
    )


def _check_counts(warmup: int, minimum: int, maximum: int, target_seconds: float) -> None:
    if warmup < 0:
        raise UsageError(f"time_calls: warmup={warmup} is negative; pass 0 or more calls")
    if minimum < 1:
        raise UsageError(f"time_calls: min_repetitions={minimum} times nothing; pass 1 or more")
    if maximum < minimum:
        raise UsageError(
            f"time_calls: max_repetitions={maximum} is below min_repetitions={minimum}; "
            "raise max_repetitions or lower min_repetitions"
        )
    if not target_seconds >= 0:
        raise UsageError(
            f"time_calls: target_seconds={target_seconds} is not a duration; pass 0 or more"
        )


def _noop() -> None:
    return None
