"""Error by row against how often the row's id occurs in an index input: where an accumulation
error concentrates when a few ids (Zipf-like tokens) take most of the contributions."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernelaudit.findings import Finding
from kernelaudit.report.case_grid import distribution, size
from kernelaudit.report.plots import CANDIDATE_COLOUR, NEUTRAL_COLOUR, finite, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


@dataclass(frozen=True)
class RowPoints:
    """Rows of one case: their ids, how often each id occurs, and each row's error (or drift)."""

    case: str
    rows: tuple[int, ...]
    counts: tuple[float, ...]
    errors: tuple[float, ...]


@dataclass(frozen=True)
class CountBin:
    """Every row whose id occurs `low` to `high` times: their median and largest error."""

    low: float
    high: float
    median: float
    largest: float


@dataclass(frozen=True)
class RowPlot:
    series: tuple[RowPoints, ...]
    median_count: float | None
    error: str
    """What the vertical axis measures."""
    title: str
    bins: tuple[CountBin, ...] = ()
    """Every row of one failing case, binned by its id's count (numerics' "error by id
    count"): the whole picture behind the worst rows."""
    bins_case: str = ""
    """The case the bins are of."""


def row_plot(finding: Finding) -> RowPlot | None:
    """The rows a finding's evidence lists with their id counts: the worst rows of each failing
    case (numerics), or the embedding rows that drift most (training); None without counts."""
    evidence = dict(finding.evidence)
    drifting = evidence.get("rows that drift most")
    if isinstance(drifting, list):
        points = _points(
            "embedding rows", drifting, "row (token id)", "token count", "in envelopes"
        )
        if points is None:
            return None
        return RowPlot(
            (points,),
            _median_count(drifting),
            "update drift of the row, in envelopes",
            "rows that drift most, by their token's count",
        )
    series = []
    if finding.probe is not None:
        case = f"{distribution(finding.probe.case)} @ {size(finding.probe.case)}"
        series.append(_points(case, evidence.get("worst rows"), "row", "id_count", "error"))
    others = evidence.get("other failing cases")
    for other in others if isinstance(others, list) else []:
        if isinstance(other, Mapping):
            rows = other.get("worst rows")
            series.append(_points(str(other.get("case", "")), rows, "row", "id_count", "error"))
    kept = tuple(s for s in series if s is not None)
    if not kept:
        return None
    counts = evidence.get("id counts")
    median = finite(counts.get("median count of used ids")) if isinstance(counts, Mapping) else None
    return RowPlot(
        kept,
        median,
        "error of the row",
        "worst rows of each failing case, by their id's count",
        *_binned(evidence, others if isinstance(others, list) else []),
    )


def row_figure(plot: RowPlot) -> Figure:
    """Each row as a point at (its id's count, its error), labelled with its id; the median
    count of the ids used as a dashed line: rows far right of it are the frequent ids."""
    figure = new_figure(8.0, 3.6)
    axes = figure.add_subplot()
    for k, points in enumerate(plot.series):
        axes.scatter(
            points.counts,
            points.errors,
            marker=_MARKERS[k % len(_MARKERS)],
            s=36,
            alpha=0.8,
            color=CANDIDATE_COLOUR if k == 0 else None,
            label=points.case,
            gid=f"rows-{k}",
        )
        for row, count, error in zip(points.rows, points.counts, points.errors, strict=True):
            axes.annotate(
                str(row), (count, error), textcoords="offset points", xytext=(4, 3), fontsize=7
            )
    if plot.bins:
        middles = [math.sqrt(b.low * b.high) for b in plot.bins]
        axes.plot(
            middles,
            [b.largest for b in plot.bins],
            color=NEUTRAL_COLOUR,
            marker="_",
            markersize=14,
            label=f"every row of {plot.bins_case}: largest error by id count",
            gid="bins-largest",
        )
        axes.plot(
            middles,
            [b.median for b in plot.bins],
            color=NEUTRAL_COLOUR,
            linestyle=":",
            label="... and median error",
            gid="bins-median",
        )
    if plot.median_count is not None and plot.median_count > 0:
        axes.axvline(
            plot.median_count,
            color=NEUTRAL_COLOUR,
            linestyle="--",
            label=f"median count of the ids used ({plot.median_count:.3g})",
            gid="median-count",
        )
    axes.set_xscale("log")
    errors = [e for p in plot.series for e in p.errors]
    errors += [e for b in plot.bins for e in (b.median, b.largest) if e > 0]
    if min(errors) > 0 and max(errors) / min(errors) > 20:
        axes.set_yscale("log")
    axes.set_xlabel("occurrences of the row's id (log scale)")
    axes.set_ylabel(plot.error)
    axes.set_title(plot.title, fontsize=10, loc="left")
    axes.grid(True, color="#eeeeee")
    figure.legend(fontsize=7, loc="outside right upper")
    return figure


def _binned(evidence: Mapping[str, Any], others: list[Any]) -> tuple[tuple[CountBin, ...], str]:
    """The bins of the finding's own case, else of the first other failing case that has
    some, and which case that is."""
    own = _bins(evidence.get("error by id count"))
    if own:
        return own, "the smallest failing case"
    for other in others:
        if isinstance(other, Mapping):
            bins = _bins(other.get("error by id count"))
            if bins:
                return bins, str(other.get("case", "a failing case"))
    return (), ""


def _bins(table: Any) -> tuple[CountBin, ...]:
    """The bins of a numerics finding's "error by id count", finite ones only."""
    bins = []
    for entry in table if isinstance(table, list) else []:
        if not isinstance(entry, Mapping):
            continue
        low, _, high = str(entry.get("ids occurring", "")).partition("-")
        median, largest = finite(entry.get("median error")), finite(entry.get("max error"))
        if low.isdigit() and median is not None and largest is not None:
            bins.append(CountBin(float(low), float(high or low), median, largest))
    return tuple(bins)


def _median_count(rows: list[Any]) -> float | None:
    """The median count of the tokens used, from a row's count and its multiple of it."""
    for row in rows:
        if isinstance(row, Mapping):
            count, times = finite(row.get("token count")), finite(row.get("times the median count"))
            if count is not None and times:
                return count / times
    return None


def _points(case: str, rows: Any, row: str, count: str, error: str) -> RowPoints | None:
    if not isinstance(rows, list):
        return None
    kept = []
    for entry in rows:
        if not isinstance(entry, Mapping):
            continue
        n, e = finite(entry.get(count)), finite(entry.get(error))
        if n is not None and n > 0 and e is not None and not math.isnan(e):
            kept.append((int(entry.get(row, -1)), n, e))
    if not kept:
        return None
    ids, counts, errors = zip(*kept, strict=True)
    return RowPoints(case, ids, counts, errors)
