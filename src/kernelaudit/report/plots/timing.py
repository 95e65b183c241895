"""The timing figure: every timed sample of the candidate and the reference, their p10-p90
range and median, and the roofline's floor for the workload."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kernelaudit.report.plots import (
    CANDIDATE_COLOUR,
    LIMIT_COLOUR,
    REFERENCE_COLOUR,
    finite,
    new_figure,
)
from kernelaudit.timing.measure import format_seconds

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_SIDES = (("candidate", CANDIDATE_COLOUR), ("reference", REFERENCE_COLOUR))


def timing_figure(evidence: Mapping[str, Any]) -> Figure | None:
    """Seconds per call on a log axis, one band per side; None when the evidence times
    neither side. Within a band the samples rise in the order they were taken, so a clock
    that drifts or a cache that warms shows as a slope."""
    from matplotlib.ticker import FuncFormatter

    sides = [
        (name, colour, evidence[name])
        for name, colour in _SIDES
        if isinstance(evidence.get(name), Mapping) and finite(evidence[name].get("median_s"))
    ]
    if not sides:
        return None
    figure = new_figure(8.0, 1.7 + 0.6 * len(sides))
    axes = figure.add_subplot()
    for i, (name, colour, timing) in enumerate(sides):
        samples = [s for s in map(finite, timing.get("samples_s", ())) if s is not None and s > 0]
        spread = [i + 0.32 * (k / max(len(samples) - 1, 1) - 0.5) for k in range(len(samples))]
        axes.scatter(samples, spread, s=9, alpha=0.35, color=colour, gid=f"{name}-samples")
        low, high = finite(timing.get("p10_s")), finite(timing.get("p90_s"))
        if low is not None and high is not None:
            axes.hlines(i, low, high, color=colour, linewidth=3, alpha=0.8)
        median = float(timing["median_s"])
        axes.plot(
            [median],
            [i],
            marker="D",
            markersize=8,
            color=colour,
            markeredgecolor="black",
            linestyle="none",
            label=f"{name}: median {format_seconds(median)} of {len(samples)} samples",
            gid=f"{name}-median",
        )
    roofline = evidence.get("roofline")
    roofline = roofline if isinstance(roofline, Mapping) else {}
    floor = finite(roofline.get("floor_s"))
    if floor is not None and floor > 0:
        axes.axvline(
            floor,
            color=LIMIT_COLOUR,
            linestyle="--",
            label=f"roofline floor {format_seconds(floor)} ({roofline.get('bound')}-bound)",
            gid="roofline-floor",
        )
    axes.set_xscale("log")
    axes.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_seconds(v)))
    axes.set_yticks(range(len(sides)), labels=[name for name, _, _ in sides])
    axes.set_ylim(-0.6, len(sides) - 0.4)
    axes.set_xlabel("seconds per call (log scale): samples, p10-p90, median")
    axes.set_title("time per call", fontsize=10, loc="left")
    axes.grid(True, axis="x", color="#eeeeee")
    figure.legend(fontsize=8, loc="outside right upper")
    return figure
