"""What every HTML page kernelaudit writes shares: one self-contained document (styles inline,
no external assets, nothing to fetch), its look, and escaping."""

from __future__ import annotations

import html
from collections.abc import Sequence

from kernelaudit.findings import Finding

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; color: #222; max-width: 1150px;
       padding: 0 1em; }
h1 { font-size: 1.45em; } h2 { font-size: 1.2em; margin-top: 2.2em; border-top: 2px solid #ddd;
     padding-top: .6em; }
h3 { font-size: 1.05em; margin-top: 1.4em; } h4 { font-size: 1em; margin: 1.2em 0 .3em; }
.PASS { color: #17803d; font-weight: bold; } .FAIL { color: #c62828; font-weight: bold; }
.other { color: #6a1b9a; font-weight: bold; }
.fail { color: #c62828; } .warn { color: #a66a00; } .note { color: #1565c0; }
.finding { border-left: 4px solid #ccc; padding: .1em 0 .4em .9em; margin: 1em 0; }
.finding.fail { border-color: #c62828; } .finding.warn { border-color: #f9a825; }
.finding.note { border-color: #90caf9; } .finding > * { color: #222; }
.badge { font-weight: bold; text-transform: uppercase; font-size: .85em; }
.badge.fail { color: #c62828; } .badge.warn { color: #a66a00; } .badge.note { color: #1565c0; }
table { border-collapse: collapse; margin: .4em 0 .8em; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f5f5f5; } td.number { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f6f6; padding: .5em; white-space: pre-wrap; font-size: 12px; }
code { background: #f3f3f3; padding: 0 .25em; }
figure { margin: .6em 0; display: inline-block; vertical-align: top; }
figure svg { max-width: 100%; height: auto; }
.conclusion { background: #fff8e1; padding: .6em; border-left: 4px solid #f9a825; }
.caution { color: #a66a00; } .muted { color: #666; }
details > summary { cursor: pointer; color: #444; }
"""

SHOWN_ROWS = 10
"""Rows of a table shown before the rest is folded away."""


def document(title: str, body: str, style: str = "") -> str:
    """One complete HTML page: `body` under `title`, with the shared look and `style` added."""
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{escape(title)}</title><style>{STYLE}{style}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


def verdict_class(verdict: str) -> str:
    """The style of a verdict: PASS, FAIL, or another status (a job that was not audited)."""
    return verdict if verdict in ("PASS", "FAIL") else "other"


def table(head: Sequence[str], rows: Sequence[Sequence[str]], fold: bool = True) -> str:
    """An HTML table of cells already escaped, under `head` (none when every heading is
    empty); rows past `SHOWN_ROWS` are folded away unless `fold` is False."""
    heading = "".join(f"<th>{escape(h)}</th>" for h in head)
    heading = f"<tr>{heading}</tr>" if any(head) else ""

    def body(chunk: Sequence[Sequence[str]]) -> str:
        return "".join(
            "<tr>" + "".join(f"<td{_align(c)}>{c}</td>" for c in row) + "</tr>" for row in chunk
        )

    if not fold or len(rows) <= SHOWN_ROWS + 2:
        return f"<table>{heading}{body(rows)}</table>"
    rest = rows[SHOWN_ROWS:]
    return (
        f"<table>{heading}{body(rows[:SHOWN_ROWS])}</table>"
        f"<details><summary>{len(rest)} more rows</summary>"
        f"<table>{heading}{body(rest)}</table></details>"
    )


def severity_counts(findings: Sequence[Finding]) -> tuple[int, int, int]:
    """How many findings are failing, warnings and notes."""
    severities = [f.severity for f in findings]
    return severities.count("fail"), severities.count("warn"), severities.count("note")


def counts_html(counts: tuple[int, int, int]) -> str:
    """The counts as "2 failing, 1 note(s)", each in its severity's colour; "-" for none."""
    words = (("fail", "failing"), ("warn", "warning(s)"), ("note", "note(s)"))
    said = [
        f"<span class='{s}'>{n} {w}</span>" for (s, w), n in zip(words, counts, strict=True) if n
    ]
    return ", ".join(said) or "-"


def _align(cell: str) -> str:
    stripped = cell.replace(".", "").replace("-", "").replace("e", "").replace("+", "")
    return " class='number'" if stripped.isdigit() else ""
