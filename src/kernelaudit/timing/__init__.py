"""Honest timing of candidates and references: event timing with a cold cache and a device-wide
wait (`measure`), the profiler's kernel times to cross-check it (`kernels`), and the device's
measured roofline to judge it against (`peaks`, `roofline`)."""

from kernelaudit.timing.kernels import (
    KernelProfile,
    KernelTime,
    agreement,
    is_mismatch,
    profile_kernels,
)
from kernelaudit.timing.measure import Timing, format_seconds, time_calls
from kernelaudit.timing.peaks import measure_roofline
from kernelaudit.timing.roofline import (
    FLOOR_SLACK,
    Roofline,
    RooflinePosition,
    derived_bytes,
    derived_flops,
    position,
)

__all__ = [
    "FLOOR_SLACK",
    "KernelProfile",
    "KernelTime",
    "Roofline",
    "RooflinePosition",
    "Timing",
    "agreement",
    "derived_bytes",
    "derived_flops",
    "format_seconds",
    "is_mismatch",
    "measure_roofline",
    "position",
    "profile_kernels",
    "time_calls",
]
