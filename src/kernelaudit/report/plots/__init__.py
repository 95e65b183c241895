"""The HTML report's figures, drawn with matplotlib and embedded as inline SVG.

matplotlib is imported only when a figure is drawn, so importing kernelaudit stays fast and a
process that never writes an HTML report never loads it. Figures are drawn on matplotlib's Agg
canvas without pyplot: no window, no display, and no change to the backend a user's own
process (a notebook) chose.
"""

from __future__ import annotations

import io
import math
import re
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

REFERENCE_COLOUR = "#1f77b4"
CANDIDATE_COLOUR = "#d62728"
LIMIT_COLOUR = "#c62828"
PASSED_COLOUR = "#e3f1e5"
NEUTRAL_COLOUR = "#9e9e9e"

_ID = re.compile(r'\bid="([^"]+)"')
_REFERENCE = re.compile(r'(href="#|url\(#)([^")]+)')


_LOADING = threading.Lock()


def load() -> None:
    """Import what drawing a figure and writing it as SVG needs (matplotlib and its font
    list: half a second or more in a fresh process). A command that audits on a GPU calls it in
    a thread of its own while the audit runs (`outputs.load_figures_ahead`), and the report
    calls it before its first figure: one at a time, so that the report never imports a part
    of matplotlib while the thread is inside another (two threads importing one package's
    modules in opposite orders leave it half-initialised for the whole process)."""
    with _LOADING:
        _imported()


def _imported() -> None:
    import matplotlib.backends.backend_agg
    import matplotlib.backends.backend_svg
    import matplotlib.figure
    import matplotlib.font_manager  # noqa: F401


def new_figure(width: float, height: float) -> Figure:
    """An empty figure of `width` x `height` inches on the Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def svg(figure: Figure, scope: str) -> str:
    """`figure` as an `<svg>` element to place inside an HTML page.

    Text stays text (searchable, selectable). Every id in the drawing is prefixed with
    `scope`, so the many figures of one page never share one: an SVG element that points at
    a marker or a clipping path by id would otherwise draw another figure's. The XML prolog,
    document type, metadata and namespace declarations, which an HTML page neither needs nor
    fetches, are left out.
    """
    import matplotlib

    out = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": scope}):
        figure.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    text = out.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)
    text = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text, count=2)
    text = text.replace("xlink:href=", "href=")
    text = _ID.sub(lambda m: f'id="{_scoped(scope, m.group(1))}"', text)
    return _REFERENCE.sub(lambda m: m.group(1) + _scoped(scope, m.group(2)), text)


def _scoped(scope: str, name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{scope}-{name}")


def finite(value: object) -> float | None:
    """`value` as a finite float; None for anything else (a JSON report spells infinities
    and NaN as strings)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
