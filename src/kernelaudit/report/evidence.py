"""A finding's evidence as HTML a person reads: scalars in one table, mappings and lists of
records as tables, error metrics side by side, long tracebacks folded, and long lists of
numbers (timing samples) summarised by their count, median, minimum and maximum."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from kernelaudit.findings import Finding
from kernelaudit.report.page import escape, table
from kernelaudit.timing.measure import format_seconds

LISTED = 8
"""Lists of numbers longer than this are summarised, not listed."""
_METRIC_FIELDS = ("", "baseline", "floor", "error_ratio", "budget", "sensitivity", "nearby")
_NOT_TABULATED = ("conclusion", "reason", "loss curves")
_SIDES = ("candidate", "reference")
"""The timing check's two measured sides, shown as two columns of one table."""


def evidence_html(finding: Finding) -> str:
    """Every piece of `finding`'s evidence except what the page shows elsewhere: its
    conclusion first, as a paragraph; a reason that repeats its title left out; the loss
    curves (plotted) summarised; the candidate's and the reference's times side by side."""
    evidence = dict(finding.evidence)
    lead = []
    if isinstance(evidence.get("conclusion"), str):
        lead.append(f"<p class='conclusion'>{escape(evidence['conclusion'])}</p>")
    reason = evidence.get("reason")
    if isinstance(reason, str) and reason and reason not in finding.title:
        lead.append(f"<p>{escape(reason)}</p>")
    timed = [k for k in _SIDES if isinstance(evidence.get(k), Mapping)]
    scalars, parts = [], []
    if len(timed) == len(_SIDES):
        parts.append(_section("time per call", _columns({k: evidence[k] for k in timed})))
    for key, value in finding.evidence:
        if key in _NOT_TABULATED or (key in _SIDES and len(timed) == len(_SIDES)):
            continue
        if _empty(value):
            continue
        name = _name(key, finding)
        if _scalar(value) and not _long_text(value):
            scalars.append([escape(name), _value(key, value)])
        elif key == "metrics" and isinstance(value, Mapping):
            parts.append(_section(name, _metrics(value)))
        elif _long_text(value):
            lines = [line for line in str(value).splitlines() if line.strip()]
            parts.append(
                f"<details><summary><b>{escape(name)}</b>: {escape(lines[-1] if lines else '')}"
                f"</summary><pre>{escape(value)}</pre></details>"
            )
        else:
            parts.append(_section(name, _value(key, value)))
    if isinstance(evidence.get("loss curves"), Mapping):
        curves = evidence["loss curves"]
        steps = max((len(c.get("steps", ())) for c in curves.values()), default=0)
        said = f"{steps} steps each for {', '.join(curves)}: plotted above"
        scalars.append(["loss curves", escape(said)])
    head = table(["evidence", "value"], scalars) if scalars else ""
    return "".join([*lead, head, *parts])


def _summary_of(key: str, values: Sequence[Any]) -> str:
    """A long list of numbers in one line: "200 samples: median 1.1 ms, min 860 us, max 33 ms"."""
    numbers = sorted(float(v) for v in values if isinstance(v, (int, float)))
    if not numbers:
        return f"{len(values)} values"
    noun = "samples" if "sample" in key else "values"
    return (
        f"{len(values)} {noun}: median {_number(key, statistics.median(numbers))}, "
        f"min {_number(key, numbers[0])}, max {_number(key, numbers[-1])}"
    )


def _name(key: str, finding: Finding) -> str:
    """The evidence's key as the page names it: the engine names the other cases of any
    finding "other failing cases", and a note's or a warning's cases did not fail."""
    if key == "other failing cases" and finding.severity != "fail":
        return "other cases flagged"
    return key


def _section(name: str, content: str) -> str:
    return f"<p><b>{escape(name)}</b></p>{content}"


def _value(key: str, value: Any) -> str:
    """`value` as HTML: a table for a mapping or a list of records, text for the rest."""
    if isinstance(value, Mapping):
        if value and all(_records(v) for v in value.values()):
            return "".join(f"<p>{escape(k)}</p>{_value(str(k), v)}" for k, v in value.items())
        if value and all(isinstance(v, Mapping) for v in value.values()):
            return _columns(value, across=False)
        return table(["", ""], [[escape(k), _cell(str(k), v)] for k, v in value.items()])
    if _records(value):
        columns = list(dict.fromkeys(c for v in value for c in v))
        return table(columns, [[_cell(c, v[c]) if c in v else "" for c in columns] for v in value])
    return value_text(key, value)


def _columns(mappings: Mapping[str, Mapping[str, Any]], across: bool = True) -> str:
    """Several mappings in one table: one column each (`across`), or one row each."""
    fields = list(dict.fromkeys(f for m in mappings.values() for f in m))
    if across:
        rows = [
            [escape(f)] + [_cell(f, m[f]) if f in m else "" for m in mappings.values()]
            for f in fields
        ]
        return table(["", *mappings], rows)
    rows = [
        [escape(k)] + [_cell(f, m[f]) if f in m else "" for f in fields]
        for k, m in mappings.items()
    ]
    return table(["", *fields], rows)


def _records(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and bool(value)
        and all(isinstance(v, Mapping) for v in value)
    )


def _cell(key: str, value: Any) -> str:
    """A value inside a table: text, nested mappings and lists written out item by item."""
    if isinstance(value, str) and "\n" in value:
        return f"<pre>{escape(value)}</pre>"
    return value_text(key, value)


def value_text(key: str, value: Any) -> str:
    """`value` as one line of HTML: numbers to four significant digits (seconds, for a key
    ending in "_s", with their unit), mappings and lists item by item, long lists of numbers
    summarised."""
    if value is None:
        return "<span class='muted'>none</span>"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return escape(_number(key, value))
    if isinstance(value, Mapping):
        return "; ".join(f"{escape(k)}: {value_text(str(k), v)}" for k, v in value.items())
    if _records(value):
        return "<br>".join(value_text(key, v) for v in value)
    if isinstance(value, (list, tuple)):
        if len(value) > LISTED and all(isinstance(v, (int, float)) for v in value):
            return escape(_summary_of(key, value))
        if all(isinstance(v, (list, tuple)) for v in value):
            return ", ".join("(" + ", ".join(escape(i) for i in v) + ")" for v in value)
        return ", ".join(value_text(key, v) for v in value)
    return escape(value)


def _number(key: str, value: float) -> str:
    if isinstance(value, float) and key.endswith("_s"):
        return format_seconds(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _metrics(metrics: Mapping[str, Any]) -> str:
    """Error metrics side by side: one row per metric (normwise, worst_row, componentwise),
    its error, the baseline's, the floor, the ratio, the budget; other figures below."""
    names = [k.removesuffix("_error_ratio") for k in metrics if k.endswith("_error_ratio")]
    used = {f"{n}_{f}" if f else n for n in names for f in _METRIC_FIELDS}
    fields = [f for f in _METRIC_FIELDS if any((f"{n}_{f}" if f else n) in metrics for n in names)]
    rows = [
        [escape(n)] + [_cell("", metrics.get(f"{n}_{f}" if f else n)) for f in fields]
        for n in names
    ]
    head = ["metric", *[(f or "error").replace("_", " ") for f in fields]]
    rest = [[escape(k), _cell(k, v)] for k, v in metrics.items() if k not in used]
    return (table(head, rows) if rows else "") + (table(["", ""], rest) if rest else "")


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _long_text(value: Any) -> bool:
    return isinstance(value, str) and (value.count("\n") >= 3 or len(value) > 400)


def _empty(value: Any) -> bool:
    return isinstance(value, (list, tuple, dict)) and not value
