"""The training check's figures: the reference's and the candidate's loss curves, the loss gap
against the envelope of correct kernels, and the departures the verdict rests on (the loss gap
and each parameter's update drift, in envelopes) against their limits."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kernelaudit.report.plots import (
    CANDIDATE_COLOUR,
    LIMIT_COLOUR,
    NEUTRAL_COLOUR,
    REFERENCE_COLOUR,
    finite,
    new_figure,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_OPTIMIZER_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd")
_MARKS = 12
"""About how many markers each loss curve carries: enough to tell the two apart where they
coincide, few enough not to hide the lines."""


def loss_figure(optimizer: str, curve: Mapping[str, Sequence[Any]]) -> Figure | None:
    """Both sides' loss over the steps (left) and |candidate - reference| against the envelope
    (right, log scale), for one optimizer; None when the curve holds no steps.

    The reference is a broad, pale line with hollow circles, the candidate a thin dashed line
    with crosses placed between the circles: where the two coincide both stay visible.
    """
    steps = _numbers(curve.get("steps", ()))
    if not steps:
        return None
    figure = new_figure(10.0, 3.4)
    loss, gap = figure.subplots(1, 2)
    every = max(1, len(steps) // _MARKS)
    loss.plot(
        steps,
        _numbers(curve.get("reference", ())),
        color=REFERENCE_COLOUR,
        linewidth=3.2,
        alpha=0.5,
        marker="o",
        markersize=6,
        markerfacecolor="none",
        markevery=every,
        label="reference",
        gid="loss-reference",
    )
    loss.plot(
        steps,
        _numbers(curve.get("candidate", ())),
        color=CANDIDATE_COLOUR,
        linewidth=1.2,
        linestyle=(0, (5, 3)),
        marker="x",
        markersize=5,
        markevery=(every // 2, every),
        label="candidate",
        gid="loss-candidate",
    )
    _label(loss, f"{optimizer}: training loss", "loss")
    gaps = [v if v is not None and v > 0 else math.nan for v in _values(curve.get("gap", ()))]
    envelope = [
        v if v is not None and v > 0 else math.nan for v in _values(curve.get("envelope", ()))
    ]
    gap.axvspan(
        steps[len(steps) - max(len(steps) // 4, 1)],
        steps[-1],
        color="#fff3c4",
        label="judged: median gap over the last quarter",
    )
    gap.plot(
        steps,
        gaps,
        color=CANDIDATE_COLOUR,
        linewidth=1.4,
        label="|candidate - reference|",
        gid="loss-gap",
    )
    gap.plot(
        steps,
        envelope,
        color=NEUTRAL_COLOUR,
        linestyle="--",
        linewidth=1.4,
        label="envelope: largest gap of a correct kernel",
        gid="loss-envelope",
    )
    if any(math.isfinite(v) for v in gaps + envelope):
        gap.set_yscale("log")
    _label(gap, f"{optimizer}: loss gap against the envelope", "|loss difference|")
    return figure


def departure_figure(
    per_optimizer: Mapping[str, Mapping[str, Any]],
    parameter_drift: Mapping[str, Sequence[Mapping[str, Any]]],
) -> Figure | None:
    """The two measures the training verdict compares with a limit, per optimizer: the loss
    gap over the last quarter of steps and each parameter's summed update drift, both in
    envelopes, with each limit drawn as a red dashed line; None without either measure."""
    from matplotlib.patches import Patch

    from kernelaudit.training.envelope import DRIFT_SLACK, LOSS_SLACK

    optimizers = list(per_optimizer)
    parameters = list(dict.fromkeys(d["parameter"] for ds in parameter_drift.values() for d in ds))
    if not optimizers and not parameters:
        return None
    figure = new_figure(10.0, 1.9 + 0.32 * max(len(parameters) * len(parameter_drift), 4))
    loss, drift = figure.subplots(1, 2, width_ratios=(1, 2))
    ratios = [finite(per_optimizer[o].get("loss gap in envelopes")) for o in optimizers]
    # a short run's loss is reported, not judged (`Judgement.loss_judged`)
    judged = [per_optimizer[o].get("loss judged", True) is not False for o in optimizers]
    bars = loss.bar(
        optimizers,
        [r if r is not None else 0.0 for r in ratios],
        color=[
            _beyond(r, LOSS_SLACK) if j else NEUTRAL_COLOUR
            for r, j in zip(ratios, judged, strict=True)
        ],
    )
    for optimizer, bar in zip(optimizers, bars, strict=True):
        bar.set_gid(f"loss-gap-{optimizer}")
    said = [
        "stopped"
        if per_optimizer[o].get("stopped")
        else _ratio_text(r) + ("" if j else " (not judged)")
        for o, r, j in zip(optimizers, ratios, judged, strict=True)
    ]
    loss.bar_label(bars, labels=said, fontsize=8)
    loss.axhline(
        LOSS_SLACK,
        color=LIMIT_COLOUR,
        linestyle="--",
        label=f"limit {LOSS_SLACK:g}",
        gid="loss-limit",
    )
    _label(loss, "loss gap over the last quarter", "in envelopes", x="optimizer")
    height = 0.8 / max(len(parameter_drift), 1)
    for k, (optimizer, drifts) in enumerate(parameter_drift.items()):
        by_name = {d["parameter"]: finite(d.get("in envelopes")) for d in drifts}
        values = [by_name.get(p) for p in parameters]
        said = [_ratio_text(by_name[p]) if p in by_name else "" for p in parameters]
        bars = drift.barh(
            [i + (k - (len(parameter_drift) - 1) / 2) * height for i in range(len(parameters))],
            [v if v is not None else 0.0 for v in values],
            height=height,
            color=_OPTIMIZER_COLOURS[k % len(_OPTIMIZER_COLOURS)],
            edgecolor=[
                LIMIT_COLOUR if p in by_name and _beyond(v, DRIFT_SLACK) == LIMIT_COLOUR else "none"
                for p, v in zip(parameters, values, strict=True)
            ],
            linewidth=1.5,
        )
        for parameter, bar in zip(parameters, bars, strict=True):
            bar.set_gid(f"drift-{optimizer}-{parameter}")
        drift.bar_label(bars, labels=said, fontsize=8, padding=2)
    drift.axvline(
        DRIFT_SLACK,
        color=LIMIT_COLOUR,
        linestyle="--",
        label=f"limit {DRIFT_SLACK:g}",
        gid="drift-limit",
    )
    drift.set_yticks(range(len(parameters)), labels=parameters)
    drift.invert_yaxis()
    _label(drift, "parameter update drift, in envelopes (red edge: past the limit)", "", x="")
    # one swatch per optimizer, whatever the edge of its first bar
    swatches = [
        Patch(color=_OPTIMIZER_COLOURS[k % len(_OPTIMIZER_COLOURS)], label=optimizer)
        for k, optimizer in enumerate(parameter_drift)
    ]
    drift.legend(handles=[*drift.get_lines(), *swatches], fontsize=8)
    return figure


def _label(axes: Axes, title: str, y: str, x: str = "step") -> None:
    axes.set_title(title, fontsize=10, loc="left")
    axes.set_xlabel(x)
    if y:
        axes.set_ylabel(y)
    axes.grid(True, color="#eeeeee")
    axes.set_axisbelow(True)
    axes.legend(fontsize=8)


def _beyond(value: float | None, limit: float) -> str:
    return LIMIT_COLOUR if value is None or value > limit else NEUTRAL_COLOUR


def _ratio_text(value: float | None) -> str:
    """A ratio as the evidence gives it; None: not finite (nothing to divide by)."""
    return "∞" if value is None else f"{value:.2f}"


def _values(values: Sequence[Any]) -> list[float | None]:
    return [finite(v) for v in values]


def _numbers(values: Sequence[Any]) -> list[float]:
    return [math.nan if v is None else v for v in _values(values)]
