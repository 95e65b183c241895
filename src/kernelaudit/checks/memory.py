"""Memory hygiene: what a call leaves allocated on the device after it returns, whether that
grows from call to call (a leak), and how high the call's peak goes next to the reference's.

The worker counts what stays allocated after a call from the device's memory when the candidate
was imported, less everything the harness itself holds (the call's inputs and outputs among
it) and the library workspaces torch keeps: what remains is the candidate's. A leak fails; memory
held but not growing is a warning (a cache the caller cannot see or free); the peak is a note,
a warning when far above the reference's. GPU only.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any, ClassVar

from kernelaudit.checks.base import (
    NEEDS_CUDA,
    Failure,
    Observation,
    PlanContext,
    Probe,
    RunPlan,
    Step,
)
from kernelaudit.checks.sweep import boundary_cases
from kernelaudit.profiles import Profile

CALLS = 5
"""Calls on the first workload, back to back: growth on every one of them is a leak."""
HELD_BYTES = 32 << 20
"""Memory held after a call from which it is worth a warning. Below it: library workspaces torch
keeps per stream and cannot always hand back (cuBLASLt's among them, up to 32 MiB on Hopper;
1 MiB measured on an H100 after a first call), which are not the candidate's. A cache that
grows is a leak whatever its size."""
UNSEEN_STEP_BYTES = 1 << 20
"""Growth per call of the memory outside torch's allocator that is worth a warning (the driver
hands memory out in pages of 2 MiB, and other processes move the figure too)."""
PEAK_RATIO = 4.0
PEAK_EXCESS_BYTES = 64 << 20
"""A peak above the reference's by both this ratio and this many bytes is a warning."""


class Memory:
    name: ClassVar[str] = "memory"
    summary: ClassVar[str] = (
        "no device memory leaks across calls or stays held after a call; the call's peak "
        "next to the reference's (GPU only)"
    )

    def unavailable(self, device: str, profile: Profile) -> str:
        return "" if device.startswith("cuda") else NEEDS_CUDA

    def plan(self, ctx: PlanContext) -> list[Probe]:
        if not ctx.device.startswith("cuda"):
            return []
        case = boundary_cases(ctx, 0)[0]
        return [Probe(self.name, case, RunPlan(steps=(Step(memory=True, keep=False),) * CALLS))]

    def judge(self, observation: Observation) -> list[Failure]:
        result = observation.result
        if observation.probe.check != self.name or result.error or len(result.calls) < 2:
            return []
        held = [call.device_bytes_held for call in result.calls]
        peaks = [call.device_peak_bytes for call in result.calls]
        if min(held) < 0 or min(peaks) < 0:
            return []  # not measured (no CUDA device)
        failures = _held(held)
        failures += _unseen([call.device_bytes_unseen for call in result.calls])
        reference = observation.measurements.get("reference peak bytes")
        if reference is not None:
            failures += _peak(peaks, int(reference))
        return failures

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []


def _held(held: list[int]) -> list[Failure]:
    growth = [after - before for before, after in itertools.pairwise(held)]
    evidence: tuple[tuple[str, Any], ...] = (
        ("held after each call", [size(b) for b in held]),
        ("calls", len(held)),
    )
    if all(step > 0 for step in growth):
        per_call = int(statistics.median(growth))
        return [
            Failure(
                key="leak",
                title=f"device memory leaks: {size(per_call)} more stays allocated after each "
                f"call ({size(held[0])} after the first of {len(held)} calls, "
                f"{size(held[-1])} after the last)",
                evidence=(("bytes per call", per_call), *evidence),
                score=float(per_call),
            )
        ]
    if held[-1] >= HELD_BYTES:
        return [
            Failure(
                key="held",
                title=f"the candidate keeps {size(held[-1])} of device memory allocated after "
                "it returns, beyond its outputs (not growing from call to call: a cache "
                "its callers cannot free)",
                evidence=(("bytes held", held[-1]), *evidence),
                severity="warn",
                score=float(held[-1]),
            )
        ]
    return []


def _unseen(unseen: list[int]) -> list[Failure]:
    growth = [after - before for before, after in itertools.pairwise(unseen)]
    if not growth or min(growth) < UNSEEN_STEP_BYTES:
        return []
    per_call = int(statistics.median(growth))
    return [
        Failure(
            key="leak-outside-allocator",
            title=f"device memory outside torch's allocator grows by {size(per_call)} per call "
            "(memory taken from the driver directly; another process using the device can "
            "show this way too)",
            evidence=(
                ("bytes per call", per_call),
                ("taken outside the allocator after each call", [size(b) for b in unseen]),
            ),
            severity="warn",
            score=float(per_call),
        )
    ]


def _peak(peaks: list[int], reference: int) -> list[Failure]:
    # the first call may still pay for one-time work; the calls after it show the steady peak
    steady = int(statistics.median(peaks[1:] or peaks))
    ratio = steady / max(reference, 1)
    far_above = ratio > PEAK_RATIO and steady - reference > PEAK_EXCESS_BYTES
    shown = f"{ratio:.3g}x" if reference > 0 else "the reference allocates nothing"
    return [
        Failure(
            key="peak",
            title=f"peak device memory during a call: {size(steady)}, the reference's "
            f"{size(reference)} ({shown})",
            evidence=(
                ("candidate peak bytes", steady),
                ("reference peak bytes", reference),
                ("ratio", round(ratio, 3)),
                ("peak of each call", [size(p) for p in peaks]),
            ),
            severity="warn" if far_above else "note",
            score=ratio,
        )
    ]


def size(count: int) -> str:
    """Bytes as a person reads them: "512 B", "4.00 KiB", "1.50 GiB"."""
    magnitude = abs(count)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if magnitude >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count} B"
