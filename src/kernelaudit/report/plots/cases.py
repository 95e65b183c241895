"""The heatmap of cases by value distribution and size: which inputs expose a failure, which
hide it, and how large the error ratio was where the evidence gives it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernelaudit.report.case_grid import CaseGrid
from kernelaudit.report.plots import NEUTRAL_COLOUR, PASSED_COLOUR, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_FAILED_COLOUR = "#c62828"


def case_grid_figure(grid: CaseGrid) -> Figure:
    """One cell per value distribution and size that ran, labelled "failed/ran".

    Where the evidence states error ratios, a failing cell's colour is the largest ratio
    stated for it (log scale) and its label adds "x<ratio>"; a failing cell without one is
    grey. Otherwise a cell's colour is the share of its cases that failed.
    """
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.collections import PatchCollection
    from matplotlib.colors import Colormap, LinearSegmentedColormap, LogNorm, Normalize
    from matplotlib.patches import Patch, Rectangle

    rows, columns = len(grid.distributions), len(grid.sizes)
    longest = max(len(d) for d in grid.distributions)
    figure = new_figure(max(5.5, 1.5 + 0.07 * longest + 0.75 * columns), 2.0 + 0.42 * rows)
    axes = figure.add_subplot()
    by_ratio = grid.has_error_ratios
    norm: Normalize
    cmap: Colormap
    if by_ratio:
        known = [r for row in grid.error_ratios for r in row if r is not None]
        norm = LogNorm(vmin=min(min(known), 1.0), vmax=max(max(known), 2.0))
        cmap = colormaps["YlOrRd"]
    else:
        norm = Normalize(0.0, 1.0)
        cmap = LinearSegmentedColormap.from_list("share failed", [PASSED_COLOUR, _FAILED_COLOUR])
    cells, colours = [], []
    colour: tuple[float, float, float, float] | str
    for i in range(rows):
        for j in range(columns):
            failed, ran, ratio = grid.failed[i][j], grid.ran[i][j], grid.error_ratios[i][j]
            if not ran:
                continue
            if not by_ratio:
                colour = cmap(norm(failed / ran))
            elif ratio is not None:
                colour = cmap(norm(ratio))
            else:
                colour = NEUTRAL_COLOUR if failed else PASSED_COLOUR
            cells.append(Rectangle((j, i), 1, 1))
            colours.append(colour)
            label = f"{failed}/{ran}" + (f"\n×{ratio:.3g}" if ratio is not None else "")
            axes.text(
                j + 0.5,
                i + 0.5,
                label,
                ha="center",
                va="center",
                fontsize=8,
                color="white" if _dark(colour) else "#222",
            )
    collection = PatchCollection(cells, facecolors=colours, edgecolors="white", linewidths=1.5)
    collection.set_gid("case-grid")
    axes.add_collection(collection)
    axes.set_xlim(0, columns)
    axes.set_ylim(rows, 0)
    axes.set_xticks([j + 0.5 for j in range(columns)], labels=grid.sizes, rotation=30, ha="right")
    axes.set_yticks([i + 0.5 for i in range(rows)], labels=grid.distributions)
    axes.tick_params(length=0)
    axes.set_xlabel("size (the case's shape, fewest elements first)")
    axes.set_ylabel("value distribution")
    axes.set_title(grid.title, fontsize=10, loc="left")
    for side in axes.spines.values():
        side.set_visible(False)
    mappable = ScalarMappable(norm=norm, cmap=cmap)
    if by_ratio:
        figure.colorbar(mappable, ax=axes, label="error ratio of the worst failing case")
        figure.legend(
            handles=[
                Patch(color=PASSED_COLOUR, label="passed"),
                Patch(color=NEUTRAL_COLOUR, label="failed, no ratio in the evidence"),
            ],
            loc="outside lower left",
            ncols=2,
            fontsize=8,
            frameon=False,
        )
    else:
        figure.colorbar(mappable, ax=axes, label="share of cases failed")
    return figure


def _dark(colour: tuple[float, float, float, float] | str) -> bool:
    from matplotlib.colors import to_rgb

    red, green, blue = to_rgb(colour)
    return 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
