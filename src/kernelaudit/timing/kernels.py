"""What the device itself spent on a call, from the profiler, to cross-check the event timing.

Event timing measures from a start event to the end of a device-wide wait; the profiler records
each kernel, copy and memset the device ran. When the two disagree, either the timed region
missed work (a kernel started before the start event, on another stream) or it includes time
the device was not computing (launch gaps, host work, waits). Either is worth a line in a
report: a candidate should be as fast as its kernels say.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.autograd.profiler import profile

from kernelaudit.errors import UsageError
from kernelaudit.timing.measure import (
    Timing,
    as_device,
    flush_l2_cache,
    format_seconds,
    synchronize,
)

_clock = time.perf_counter
"""Captured when the module is imported (in a worker, before the candidate is): a candidate
may replace the module attribute."""

DEVICE_ACTIVITIES = ("kernel", "gpu_memcpy", "gpu_memset")
"""Trace categories of work the device did for the call. Left out: `gpu_user_annotation`, the
device-side shadow of `record_function` ranges, which would count the same time twice."""

MISMATCH_GAP = 0.05
"""Relative gap between event time and kernel time above which the two disagree: the event
protocol's own residue (a few microseconds of wake-up and launch) stays well under it for calls
of at least `MIN_JUDGED_KERNEL_S`."""

PROFILED_SECONDS = 2.0
"""Wall time of profiling (the call, the trace written and read) after which no further call is
profiled: a call of tens of thousands of launches (a recurrence stepped from Python) takes
seconds a session, and its kernels' times per call are averages over those launches already.
The profiler's own start-up in a process is not counted (`_started`): the first session of a
fresh process took the whole budget by itself, and its call was profiled once, not three
times."""


def device_session() -> profile:
    """A profiler session that records the device's activity alone (kernels, copies, memsets):
    torch's autograd profiler asked for the CUDA activity and not the host's. Not
    `torch.profiler.profile`, whose start asks `hasattr(torch, "_inductor")`, which imports
    the compiler stack (torch._inductor and torch._dynamo, a second or more) in every process
    that profiles. It builds this same session and writes the same trace; what it adds is left
    out: a distributed run's metadata, an execution trace asked for by the environment, its
    step counting, and a setting of CUPTI's for CUDA graphs captured by the compiler."""
    return profile(use_cpu=False, use_device="cuda", use_kineto=True)


_profiler_started: set[torch.device] = set()
"""The devices this process's profiler has recorded on (its start-up paid, `_started`)."""

MIN_JUDGED_KERNEL_S = 50e-6
"""Kernel time per call under which a gap is not judged: at tens of microseconds the launch gaps
between kernels and the few microseconds of event resolution are a large share of the time."""


@dataclass(frozen=True)
class KernelTime:
    """One kernel (or copy, or memset) of the call: launches and device seconds per call,
    averaged over the profiled calls."""

    name: str
    launches: float
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "launches": self.launches, "seconds": self.seconds}


@dataclass(frozen=True)
class KernelProfile:
    """The device work of one call, averaged over `calls` profiled calls (0 when nothing was
    profiled: a CPU device).

    total_s: the sum of every kernel's time per call.
    busy_s: time per call with at least one kernel running; below total_s only when kernels
    overlapped on several streams. This is what event timing should agree with.
    """

    kernels: tuple[KernelTime, ...]
    total_s: float
    busy_s: float
    calls: int

    def to_json(self) -> dict[str, Any]:
        return {
            "kernels": [k.to_json() for k in self.kernels],
            "total_s": self.total_s,
            "busy_s": self.busy_s,
            "calls": self.calls,
        }


def profile_kernels(
    call: Callable[[], object],
    device: torch.device | str,
    calls: int = 3,
    warmup: int = 1,
    *,
    flush_l2: bool = True,
) -> KernelProfile:
    """Run `call()` `warmup` times, then up to `calls` times under the PyTorch profiler (each
    in its own session, so the L2 flush between calls, which matches `time_calls`, stays out of
    the record; no further session once the sessions so far took `PROFILED_SECONDS`) and return
    the device work per profiled call, longest first. Only the device's activity is recorded
    (its kernels, copies and memsets), not the host's operators. On a CPU device nothing is
    run and the profile is empty."""
    device = as_device(device)
    if calls < 1:
        raise UsageError(f"profile_kernels: calls={calls} profiles nothing; pass 1 or more")
    if device.type != "cuda":
        return KernelProfile(kernels=(), total_s=0.0, busy_s=0.0, calls=0)
    for _ in range(warmup):
        call()
    synchronize(device)
    _started(device)

    launches: dict[str, int] = {}
    seconds: dict[str, float] = {}
    busy = 0.0
    profiled = 0
    began = _clock()
    with tempfile.TemporaryDirectory(prefix="profile-") as folder:
        trace = Path(folder) / "trace.json"
        while profiled < calls and (profiled == 0 or _clock() - began < PROFILED_SECONDS):
            if flush_l2:
                flush_l2_cache(device)
            synchronize(device)
            with device_session() as session:
                call()
                synchronize(device)
            session.export_chrome_trace(str(trace))
            spans = device_spans(json.loads(trace.read_text()))
            for name, _, duration in spans:
                launches[name] = launches.get(name, 0) + 1
                seconds[name] = seconds.get(name, 0.0) + duration
            busy += busy_time(spans)
            profiled += 1

    kernels = tuple(
        sorted(
            (
                KernelTime(name, launches[name] / profiled, seconds[name] / profiled)
                for name in seconds
            ),
            key=lambda k: -k.seconds,
        )
    )
    return KernelProfile(
        kernels=kernels,
        total_s=sum(k.seconds for k in kernels),
        busy_s=busy / profiled,
        calls=profiled,
    )


def _started(device: torch.device) -> None:
    """Pay the profiler's start-up in this process (loading and attaching its tracing of the
    device, about as long as `PROFILED_SECONDS` on an H200) once, on a session of its own
    around one small kernel, outside the time the sessions of a call are held to."""
    if device in _profiler_started:
        return
    with tempfile.TemporaryDirectory(prefix="profile-") as folder:
        with device_session() as session:
            torch.zeros(1, device=device).add_(1.0)
            synchronize(device)
        session.export_chrome_trace(str(Path(folder) / "trace.json"))
    _profiler_started.add(device)


def device_spans(trace: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(name, start, duration) in seconds of every device activity in a Chrome trace written by
    the PyTorch profiler (timestamps there are microseconds)."""
    return [
        (str(event["name"]), float(event["ts"]) * 1e-6, float(event["dur"]) * 1e-6)
        for event in trace.get("traceEvents", ())
        if event.get("ph") == "X" and event.get("cat") in DEVICE_ACTIVITIES
    ]


def agreement(timing: Timing, profile: KernelProfile) -> tuple[float, str]:
    """The relative gap |event - kernel| / kernel between the median event time and the
    profiler's busy time per call, and a sentence saying what it means. The gap is NaN when
    there is no kernel time to compare with (a CPU run, or no device work recorded)."""
    kernel_s = profile.busy_s
    event_s = timing.median_s
    if profile.calls == 0:
        return math.nan, (
            f"Event time {format_seconds(event_s)} is not cross-checked: no kernels were "
            "profiled (a CPU device has no kernel times)."
        )
    if kernel_s <= 0:
        return math.nan, (
            f"Event time {format_seconds(event_s)} is not cross-checked: the profiler recorded "
            "no device work for the call."
        )
    gap = abs(event_s - kernel_s) / kernel_s
    count = sum(k.launches for k in profile.kernels)
    launches = f"{count:g} kernel launch{'' if count == 1 else 'es'}"
    compared = (
        f"Event time {format_seconds(event_s)} against {format_seconds(kernel_s)} of device "
        f"work per call in {launches} (profiler): {gap:.1%} apart"
    )
    if kernel_s < MIN_JUDGED_KERNEL_S:
        return gap, (
            f"{compared}; the device works under {format_seconds(MIN_JUDGED_KERNEL_S)} per call, "
            "where launch gaps and event resolution dominate, so the gap is not judged."
        )
    if gap <= MISMATCH_GAP:
        return gap, f"{compared}, within {MISMATCH_GAP:.0%}."
    if event_s > kernel_s:
        why = (
            "the timed call includes time the device did not spend on its kernels: launch "
            "gaps between kernels, host work inside the call, or waits"
        )
    else:
        why = (
            "the timed call was charged less than its kernels ran: work started before the "
            "timed region (on another stream) or the profiled calls did work the timed ones "
            "skipped"
        )
    return gap, f"{compared}, more than {MISMATCH_GAP:.0%}: a mismatch; {why}."


def is_mismatch(gap: float, profile: KernelProfile) -> bool:
    """Whether a gap from `agreement` should be reported: over `MISMATCH_GAP` on a call whose
    kernels take at least `MIN_JUDGED_KERNEL_S`."""
    return gap > MISMATCH_GAP and profile.busy_s >= MIN_JUDGED_KERNEL_S


def busy_time(spans: list[tuple[str, float, float]]) -> float:
    """Seconds during which at least one of the spans (name, start, duration) was running."""
    total = 0.0
    reach = -math.inf
    for start, end in sorted((start, start + duration) for _, start, duration in spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total
