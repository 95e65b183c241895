"""The failing region of an output: the span of indices a finding's evidence locates (elements
never written, say) drawn inside the output's extent, with the first bad elements marked."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernelaudit.report.plots import LIMIT_COLOUR, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_SPAN = re.compile(r"^(\d+)\.\.(\d+) \((\d+) of (\d+)\)$")
"""How the evidence spans a dimension: "0..255 (256 of 256)" (`oracle.mismatches.locate`: the
unwritten check's elements, numerics' NaN or infinities where the truth is finite)."""
_THINNEST = 0.02


@dataclass(frozen=True)
class Region:
    """Where the bad elements of one output lie.

    extent: each dimension's size; spans: each dimension's (first, last) bad index and how
    many distinct indices are bad; first: the first bad elements' indices.
    """

    extent: tuple[int, ...]
    spans: tuple[tuple[int, int, int], ...]
    first: tuple[tuple[int, ...], ...]
    elements: int | None


def region_of(evidence: Mapping[str, Any]) -> Region | None:
    """The region the evidence locates with "dim N indices"; None when it locates none."""
    spans: list[tuple[int, int, int]] = []
    extent: list[int] = []
    while isinstance(evidence.get(f"dim {len(spans)} indices"), str):
        match = _SPAN.match(evidence[f"dim {len(spans)} indices"])
        if match is None:
            return None
        low, high, count, total = (int(g) for g in match.groups())
        spans.append((low, high, count))
        extent.append(total)
    if not spans:
        return None
    first = evidence.get("first indices")
    points = tuple(
        tuple(int(i) for i in p)
        for p in (first if isinstance(first, list) else [])
        if isinstance(p, (list, tuple)) and len(p) == len(spans)
    )
    elements = evidence.get("elements")
    return Region(
        tuple(extent), tuple(spans), points, elements if isinstance(elements, int) else None
    )


def region_figure(region: Region, title: str) -> Figure:
    """The output's last two dimensions as a rectangle (rows down, columns across), the span
    of bad indices hatched red and the first bad elements crossed; a 1-d output is one row.
    A span thinner than `_THINNEST` of the output is widened about its middle so it stays
    visible (the axes' labels give its exact extent). Spans of leading dimensions are named in
    the title."""
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import MaxNLocator

    dims = len(region.extent)
    rows_dim, columns_dim = (None, 0) if dims == 1 else (dims - 2, dims - 1)
    rows = 1 if rows_dim is None else region.extent[rows_dim]
    columns = region.extent[columns_dim]
    row_span = (0, 0, 1) if rows_dim is None else region.spans[rows_dim]
    column_span = region.spans[columns_dim]
    figure = new_figure(6.5, 3.6)
    axes = figure.add_subplot()
    axes.add_patch(Rectangle((0, 0), columns, rows, color="#eeeeee", label="the output"))
    left, width = _visible(column_span, columns)
    top, height = _visible(row_span, rows)
    axes.add_patch(
        Rectangle(
            (left, top),
            width,
            height,
            facecolor=(0.78, 0.16, 0.16, 0.35),
            edgecolor=LIMIT_COLOUR,
            hatch="///",
            label=f"span of the bad elements ({_count(region)})",
            gid="failing-region",
        )
    )
    if region.first:
        axes.scatter(
            [p[columns_dim] + 0.5 for p in region.first],
            [(0 if rows_dim is None else p[rows_dim]) + 0.5 for p in region.first],
            marker="x",
            color="black",
            s=30,
            label="first bad elements",
            gid="first-bad",
        )
    axes.set_xlim(0, columns)
    axes.set_ylim(rows, 0)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel(f"index along dim {columns_dim} ({column_span[2]} of {columns} bad)")
    axes.set_ylabel("" if rows_dim is None else f"dim {rows_dim} ({row_span[2]} of {rows} bad)")
    leading = ", ".join(
        f"dim {d} {low}..{high}"
        for d, (low, high, _) in enumerate(region.spans[: max(dims - 2, 0)])
    )
    axes.set_title(title + (f" (within {leading})" if leading else ""), fontsize=10, loc="left")
    figure.legend(fontsize=8, loc="outside lower left", ncols=3, frameon=False)
    return figure


def _visible(span: tuple[int, int, int], size: int) -> tuple[float, float]:
    """(start, width) of a span of indices, at least `_THINNEST` of `size` wide."""
    low, high, _ = span
    width = max(high - low + 1, _THINNEST * size)
    middle = (low + high + 1) / 2
    return min(max(middle - width / 2, 0.0), size - width), width


def _count(region: Region) -> str:
    if region.elements is None:
        return "count unknown"
    return f"{region.elements} of {math.prod(region.extent)} elements"
