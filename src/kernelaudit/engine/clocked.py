"""The auditor's clock: how long the candidate's calls take, measured where the candidate
cannot reach.

The timing probe's figures are measured inside the worker, by code in the candidate's own
process, which the candidate can rebind (docs/threat-model.md). Here the auditor times whole
invocations itself, on its own clock: one of the timed call followed by `repeats` more calls
back to back (`Call.repeat`), and a base of the call alone with the same buffers laid out,
alternated; the difference, divided by the repetitions, is what a call costs, whatever the
worker says, with the channel's and the harness's costs taken out. Each repetition leaves its
results in buffers of its own in the arena, which the auditor reads (`runner.auditor.observed`): a
worker that skips the calls it is timed on leaves them without the call's results.

What it does not stop: a worker that recognises the base invocation and delays it lowers the
difference by as much, and a candidate that copies a result it kept instead of computing it
again is clocked at a copy's speed (on a GPU the roofline's floor catches that where the
case's data exceed the cache). Both take a candidate written against this harness.

The timing check compares this figure with the worker's (`checks.timing`): a call the
auditor's clock finds several times slower than the worker reported was not timed honestly,
and (on a GPU) calls back to back faster than the device's physical floor skip work. A
moment the host is busy moves one pair's figure either way; a figure that would fail is
measured again before it does, and fails only as every pair measured it. A pair's two
invocations go in turn first (base then repetitions, then the other way round), so a cost that
falls on whichever invocation comes first cancels over the pairs; and a figure is held to the
floor against the least base measured, since a busy moment only lengthens an invocation, and a
base that came back late would otherwise make every repetition look free. A host busy for
longer slows a call that starts threads or waits on the scheduler many times over between
the timing probe and the clock; so before each pair measured again the worker times the call
again as well, and each pair is held to the worker's figure made next to it. The timing
check then reports the slowest of the worker's figures: a worker that reports fast only the
first time it is timed gains nothing.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelaudit.runner.boundary.arena import slots_bytes
from kernelaudit.runner.boundary.messages import InvocationResult, OutputSlot
from kernelaudit.timing.measure import Timing, flush_l2_cache, synchronize
from kernelaudit.timing.roofline import RooflinePosition, measured_position

TARGET_S = 0.1
"""Seconds of repeated calls each clocked invocation aims at, at the worker's own figure: long
enough that the channel's jitter (a millisecond or so) is a small part of it."""

CEILING_S = 5.0
"""The most seconds of repeated calls an invocation may cost, at the timed invocation's own
wall time per call (an upper bound on a call's cost that the worker cannot lower): a worker
that reports a call far faster than it is pays for its report, within this."""

MOST_REPEATS = 4096
FEWEST_REPEATS = 1

REPEAT_BYTES = 256 << 20
"""The most bytes the repetitions' result buffers may take in the arena together."""

PAIRS = 1
"""Pairs of invocations measured first; `CONFIRMING_PAIRS` more where their figure would fail
the candidate, so that one busy moment of the host never does."""
CONFIRMING_PAIRS = 2

FACTOR = 3.0
"""How many times slower than the worker's figure the auditor's clock must find a call (and
`margin_s` besides) before the worker's figure is called wrong: the clock times calls back to
back, with a warm cache and the Python between them, the worker one call at a time after a
cache flush. On an H200 honest candidates' ratios reached 4.3 at 40 us a call, within the
margin (docs/benchmarks.md, "The auditor's clock")."""


def margin_s(device: str) -> float:
    """Seconds of a call's cost the two clocks may differ by whatever the factor: on a CPU a
    Python call's own cost and the host's scheduling; on a GPU a launch's, and as long as the
    cache flush before each of the worker's timed calls lasts, since the candidate's launches
    are issued while it runs and are not charged there (`timing.measure`), while back to back
    a call costs at least its launches."""
    target = torch.device(device)
    if target.type != "cuda":
        return 1e-3
    return 50e-6 + _flush_s(target.index if target.index is not None else 0)


@functools.cache
def _flush_s(index: int) -> float:
    """How long the worker's cache flush lasts on GPU `index`, timed by the auditor (the
    median of seven, events around each)."""
    device = torch.device("cuda", index)
    samples = []
    with torch.cuda.device(device):
        flush_l2_cache(device)
        for _ in range(7):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            flush_l2_cache(device)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
    return sorted(samples)[len(samples) // 2]


def disagrees(reported_s: float, clocked_s: float, device: str) -> bool:
    """Whether the auditor's figure for a call is too far above the worker's to be noise."""
    return clocked_s > FACTOR * reported_s + margin_s(device)


def beats_floor(found: Mapping[str, Any], seconds: float, device: str) -> RooflinePosition | None:
    """Where `seconds` a call falls below the physical floor of the timed case's work on the
    device's measured roofline (`found`: the timing probe's measurements), on a GPU; None
    otherwise (a CPU's roofline is measured on cores other processes share)."""
    if torch.device(device).type == "cpu":
        return None
    place = measured_position(found, seconds)
    return place if place is not None and place.beats_floor else None


@dataclass(frozen=True)
class Clocked:
    """What the auditor's clock measured of one timed call.

    repeats: the calls back to back in each longer invocation.
    per_call_s: the least of the pairs' figures, the auditor's own copies of returned results
        taken off: what a call costs at least, whatever moments the host was busy.
    most_s: the greatest figure the measurements allow: each repeated invocation against the
        least base measured (a moment the host was busy only lengthens an invocation), the
        copies taken off; a figure below a floor is one every repeated invocation measured
        against every base.
    samples_s: each pair's figure (before the copies' cost is taken off).
    bases_s, repeated_s: every base's and every repeated invocation's round trip, in order
        (the warm-up not counted).
    spread_s: the wider spread of those two sets of round trips, per call: how far a figure
        may be off by the host's busy moments alone. A figure below a floor by less than this
        does not show that calls skip work, only that the host was too busy to tell
        (`settled_most_s`).
    reported_s: the worker's figure each pair is held to: the timing probe's for the first,
        the call timed again just before it for each pair measured again.
    copy_s: what copying a call's returned results costs the auditor on the same device, one
        copy after another as the repetitions make them (0 for a destination-style call,
        whose repetitions fill their own slots).
    read: whether the auditor read every repetition's results in the arena.
    unlike: repetitions whose results are not the call's, bit for bit (as read).
    error: why there is no figure ("" when there is one); kind: the failed invocation's kind.
    """

    repeats: int
    per_call_s: float = 0.0
    most_s: float = 0.0
    samples_s: tuple[float, ...] = ()
    reported_s: tuple[float, ...] = ()
    copy_s: float = 0.0
    bases_s: tuple[float, ...] = ()
    repeated_s: tuple[float, ...] = ()
    spread_s: float = 0.0
    read: bool = False
    unlike: tuple[int, ...] = ()
    error: str = ""
    kind: str = ""
    seconds: float = field(default=0.0, compare=False)
    outputs: tuple[torch.Tensor, ...] = field(default=(), compare=False, repr=False)
    """The results of the call the repetitions followed, as the worker sent them: every
    repetition's must equal them (`unlike`), and the timing check judges them against the
    truth, so the repeated calls' results are judged too."""
    retimed: tuple[Timing, ...] = field(default=(), compare=False, repr=False)
    """The worker's timings of the call made again before the pairs measured again."""

    @property
    def contradicted(self) -> bool:
        """Whether a repeated invocation came back no later than the least base: with a call
        more in it, it cannot on a steady host, so the bases came back late by more than the
        calls cost and the figures say nothing of how fast the calls are."""
        return bool(self.bases_s) and min(self.repeated_s) <= min(self.bases_s)

    @property
    def settled_most_s(self) -> float:
        """The most a call can cost by these measurements, widened by how far the host moved
        them (`spread_s`); infinite where they contradict each other (`contradicted`): the
        figure a floor must be above for calls back to back to fail it."""
        return math.inf if self.contradicted else self.most_s + self.spread_s

    def net_s(self) -> tuple[float, ...]:
        """Each pair's figure with the auditor's copies taken off."""
        return _net(self.samples_s, self.copy_s)

    def disagrees(self, device: str) -> bool:
        """Whether every pair found the call too far above the worker's figure next to it to
        be noise (`disagrees`)."""
        pairs = tuple(zip(self.reported_s, self.net_s(), strict=True))
        return bool(pairs) and all(disagrees(r, s, device) for r, s in pairs)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "repeats": self.repeats,
            "per_call_s": self.per_call_s,
            "most_s": self.most_s,
            "samples_s": list(self.samples_s),
            "worker_s": list(self.reported_s),
            "copy_s": self.copy_s,
            "base_round_trips_s": list(self.bases_s),
            "repeated_round_trips_s": list(self.repeated_s),
            "spread_s": self.spread_s,
            "results_read": self.read,
            "seconds": self.seconds,
        }
        if self.unlike:
            data["repetitions_unlike"] = list(self.unlike)
        if self.error:
            data["error"] = self.error
        return data


def repeats_for(reported_s: float, upper_s: float, slots: Sequence[OutputSlot]) -> tuple[int, str]:
    """How many repetitions to clock: `TARGET_S` of calls at the worker's figure, no more
    than `CEILING_S` at `upper_s` (the timed invocation's wall time per call), and no more
    than the repetitions' buffers allow; (0, why) when not even `FEWEST_REPEATS` fit."""
    wanted = int(TARGET_S / max(reported_s, 1e-6))
    ceiling = int(CEILING_S / max(upper_s, 1e-9))
    repeats = max(FEWEST_REPEATS, min(wanted, ceiling, MOST_REPEATS))
    per_repeat = slots_bytes(slots)
    if per_repeat:
        fit = REPEAT_BYTES // per_repeat
        if fit < FEWEST_REPEATS:
            return 0, (
                f"a call's results ({per_repeat / 2**20:,.0f} MiB) are larger than the "
                f"{REPEAT_BYTES >> 20} MiB the repeated calls' results may take"
            )
        repeats = min(repeats, fit)
    return repeats, ""


def clock(
    run: Callable[[int], tuple[float, InvocationResult]],
    repeats: int,
    reported_s: float,
    too_slow: Callable[[float, float], bool],
    too_fast: Callable[[float], bool] = lambda most: False,
    copy_s: float = 0.0,
    warm_up: bool = True,
    retime: Callable[[], InvocationResult] | None = None,
) -> Clocked:
    """Time `run(0)` and `run(repeats)` (each one invocation of the worker, returning the
    seconds from sending it to its reply on the auditor's clock, and the reply) in
    alternation, each pair in the other order from the one before: `PAIRS` pairs, and
    `CONFIRMING_PAIRS` more while the figures would fail: `too_slow(reported, figure)` of
    every pair's figure and the worker's figure next to it (`reported_s` for the first pair;
    before each later one, while it is the slowness that would fail, the timing of
    `retime()`: the call timed by the worker again), or `too_fast(greatest)` of the greatest
    figure the measurements allow (`Clocked.most_s`). With `warm_up`, after one `run(0)`
    that is not counted: what the first invocation of this size costs once (device memory
    lent for it, on a GPU) is paid there. (On a CPU what a first invocation pays falls on the
    base of the first pair, which can only lower the figure.)"""
    began = time.perf_counter()
    samples: list[float] = []
    reported: list[float] = []
    retimed: list[Timing] = []
    read, unlike = True, set()
    outputs: tuple[torch.Tensor, ...] = ()

    bases: list[float] = []
    repeated: list[float] = []

    def pair(number: int) -> InvocationResult | None:
        nonlocal read, outputs
        times: dict[int, float] = {}
        for count in (0, repeats) if number % 2 == 0 else (repeats, 0):
            seconds, result = run(count)
            times[count] = seconds
            if result.error or not result.calls:
                return result
            if count:
                outcome = result.calls[0]
                read = read and outcome.repeats_read
                unlike.update(outcome.repeats_unlike)
                outputs = outputs or outcome.outputs
        bases.append(times[0])
        repeated.append(times[repeats])
        samples.append((times[repeats] - times[0]) / repeats)
        return None

    def most() -> float:
        least = min(bases)
        return max(_net([(r - least) / repeats for r in repeated], copy_s))

    def failure(result: InvocationResult) -> Clocked:
        return Clocked(
            repeats,
            error=result.error or "the worker answered without the call or its timing",
            kind=result.error_kind,
            seconds=time.perf_counter() - began,
        )

    if warm_up:
        _, first = run(0)
        if first.error or not first.calls:
            return failure(first)
    slow = False
    net: tuple[float, ...] = ()
    for number in range(PAIRS + CONFIRMING_PAIRS):
        figure = reported[-1] if reported else reported_s
        if slow and retime is not None:
            again = retime()
            timing = again.calls[0].timing if again.calls and not again.error else None
            if timing is None:
                return failure(again)
            retimed.append(timing)
            figure = timing.median_s
        reported.append(figure)
        failed = pair(number)
        if failed is not None:
            return failure(failed)
        net = _net(samples, copy_s)
        slow = all(too_slow(r, s) for r, s in zip(reported, net, strict=True))
        if number + 1 >= PAIRS and not (slow or too_fast(most())):
            break
    return Clocked(
        repeats,
        per_call_s=min(net),
        most_s=most(),
        samples_s=tuple(samples),
        reported_s=tuple(reported),
        copy_s=copy_s,
        bases_s=tuple(bases),
        repeated_s=tuple(repeated),
        spread_s=max(max(bases) - min(bases), max(repeated) - min(repeated)) / repeats,
        read=read,
        unlike=tuple(sorted(unlike)),
        seconds=time.perf_counter() - began,
        outputs=outputs,
        retimed=tuple(retimed),
    )


def _net(samples: Sequence[float], copy_s: float) -> tuple[float, ...]:
    return tuple(max(s - copy_s, 0.0) for s in samples)


COPIES = 16
"""Copies made back to back for each measurement of `copy_seconds`, of results up to
`COPY_BYTES` together; fewer of larger ones, whose copy outlasts a wait for the device."""
COPY_BYTES = 64 << 20


def copy_seconds(slots: Sequence[OutputSlot], device: str, times: int = 5) -> float:
    """What copying results of `slots` into buffers of their own costs on `device`, measured
    by the auditor (the least of `times` measurements, each of `COPIES` copies back to back
    and one wait for the device, divided): the worker makes such copies of every
    repetition's returned results, one after another with the calls, so the clock takes them
    off. One copy timed alone would charge it a whole wait for the device, tens of
    microseconds on a busy host, more than a copy of a few megabytes costs between calls."""
    if not slots:
        return 0.0
    target = torch.device(device)
    sources = [torch.zeros(s.shape, dtype=s.dtype, device=target) for s in slots]
    targets = [torch.empty_like(t) for t in sources]
    copies = max(1, min(COPIES, COPY_BYTES // max(1, slots_bytes(slots))))
    best = float("inf")
    for _ in range(times):
        synchronize(target)
        start = time.perf_counter()
        for _ in range(copies):
            for source, copy in zip(sources, targets, strict=True):
                copy.copy_(source)
        synchronize(target)
        best = min(best, (time.perf_counter() - start) / copies)
    return best
