"""Planning an audit: every check's probes, and where the seconds of planning went.

Most plans take milliseconds. What can take seconds is a reference run on the host before any
probe: the float64 truth of a small case and of some of its rows, to infer the problem's batch
axes (`inputs.batch`), which the first check that needs them pays for the others (once a
process: an estimate made before the audit, the demo's, may have paid already). That is
counted apart, as `INFERRING`, so that a report and a log say where planning went.
"""

from __future__ import annotations

import time

from kernelaudit.checks.base import Check, PlanContext, Probe
from kernelaudit.inputs.batch import seconds_inferring

INFERRING = "batch axes"
"""The part of planning spent inferring the problem's batch axes (and keyed rows) from its
reference, whichever check asked first."""

_NAMED_S = 1.0
"""A part of planning at least this long is named beside the planning phase in the progress."""


def plan_all(checks: list[Check], ctx: PlanContext) -> tuple[list[Probe], dict[str, float]]:
    """Every check's probes, in order, and the seconds each check's plan took, the inference
    from the reference apart (`INFERRING`)."""
    planned: list[Probe] = []
    seconds: dict[str, float] = {}
    for check in checks:
        began, inferring = time.perf_counter(), seconds_inferring()
        planned += check.plan(ctx)
        inferred = seconds_inferring() - inferring
        seconds[check.name] = max(0.0, time.perf_counter() - began - inferred)
        if inferred:
            seconds[INFERRING] = seconds.get(INFERRING, 0.0) + inferred
    return planned, seconds


def planning_said(seconds: dict[str, float]) -> str:
    """The planning phase as the progress names it: with its longest part where that took
    `_NAMED_S` or more."""
    if not seconds:
        return "planning"
    name, longest = max(seconds.items(), key=lambda item: item[1])
    if longest < _NAMED_S:
        return "planning"
    return f"planning (longest: {name}, {longest:.1f} s)"
