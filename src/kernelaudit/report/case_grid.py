"""Which cases ran and which failed, by value distribution and size: the grid the HTML report
draws as a heatmap, built from an audit's case records and its failing findings' evidence."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kernelaudit.findings import AuditReport, CaseRecord, Finding
from kernelaudit.inputs.case import Case

_RATIO = re.compile(r" is ([0-9.]+(?:e[+-]?[0-9]+)?)x the ")
"""How a failure's title states its error ratio (`oracle.reasons.error_reason`)."""


@dataclass(frozen=True)
class CaseGrid:
    """Cases counted by value distribution (rows) and size (columns).

    distributions: each input's value distribution and layout where not the default
        ("ids~zipf", "default values; x:transposed").
    sizes: the cases' shape labels ("workload 0", "boundary n=257"), fewest elements first.
    failed, ran: per cell, how many cases failed and how many ran.
    error_ratios: per cell, the largest error ratio the evidence states for one of its failing
        cases; None where it states none (the evidence keeps a few failing cases' numbers).
    """

    title: str
    distributions: tuple[str, ...]
    sizes: tuple[str, ...]
    failed: tuple[tuple[int, ...], ...]
    ran: tuple[tuple[int, ...], ...]
    error_ratios: tuple[tuple[float | None, ...], ...]

    @property
    def cells(self) -> int:
        return sum(1 for row in self.ran for count in row if count)

    @property
    def has_error_ratios(self) -> bool:
        return any(r is not None for row in self.error_ratios for r in row)


def report_grid(report: AuditReport) -> CaseGrid | None:
    """Every case the audit ran, a case failing when it produced a failure of any failing
    finding; None when no case ran."""
    failing = {f.key for f in report.failures}
    probes = [f.probe for f in report.failures if f.probe is not None]
    return _grid(
        "every case that ran, by value distribution and size: cases failed / ran",
        report.records,
        lambda r: bool(failing.intersection(r.failures)),
        [p.case for p in probes if _is_shrunk(p.case)],
        report.failures,
    )


def finding_grid(report: AuditReport, finding: Finding) -> CaseGrid | None:
    """The cases of the check that found `finding`, a case failing when it fails this way;
    None for a finding made without a case, or when its cases fill fewer than two cells."""
    if finding.probe is None:
        return None
    check = finding.probe.check
    grid = _grid(
        f"{finding.id}: {check} cases that fail this way, by value distribution and size",
        [r for r in report.records if r.check == check],
        lambda r: finding.key in r.failures,
        [finding.probe.case] if _is_shrunk(finding.probe.case) else [],
        [finding],
    )
    return grid if grid is not None and grid.cells >= 2 else None


def distribution(case: Case) -> str:
    """The value distributions and layouts of a case, as the engine names a case's variant."""
    values = ", ".join(f"{name}~{dist}" for name, dist in case.values) or "default values"
    layouts = ", ".join(f"{name}:{layout}" for name, layout in case.layouts)
    return f"{values}; {layouts}" if layouts else values


def size(case: Case) -> str:
    return case.label or " ".join(f"{k}={v}" for k, v in case.sizes)


def _grid(
    title: str,
    records: Iterable[CaseRecord],
    fails: Callable[[CaseRecord], bool],
    shrunk: list[Case],
    findings: Iterable[Finding],
) -> CaseGrid | None:
    counts: dict[tuple[str, str], list[int]] = {}
    elements: dict[str, int] = {}
    cases = [(r.case, fails(r)) for r in records] + [(c, True) for c in shrunk]
    for case, failed in cases:
        cell = counts.setdefault((distribution(case), size(case)), [0, 0])
        cell[0] += int(failed)
        cell[1] += 1
        elements.setdefault(size(case), math.prod(v for _, v in case.sizes))
    if not counts:
        return None
    ratios = _error_ratios(findings)
    rows = sorted({d for d, _ in counts}, key=lambda d: (d != "default values", d))
    columns = sorted(elements, key=lambda s: (elements[s], s))
    return CaseGrid(
        title=title,
        distributions=tuple(rows),
        sizes=tuple(columns),
        failed=tuple(tuple(counts.get((d, s), [0, 0])[0] for s in columns) for d in rows),
        ran=tuple(tuple(counts.get((d, s), [0, 0])[1] for s in columns) for d in rows),
        error_ratios=tuple(
            tuple(ratios.get((d, s)) if counts.get((d, s), [0])[0] else None for s in columns)
            for d in rows
        ),
    )


def _error_ratios(findings: Iterable[Finding]) -> dict[tuple[str, str], float]:
    """The error ratio each failing case's title states, by cell: the finding's own case and
    the other failing cases its evidence keeps."""
    found: dict[tuple[str, str], float] = {}

    def keep(cell: tuple[str, str], title: object) -> None:
        match = _RATIO.search(str(title))
        if match is not None:
            found[cell] = max(found.get(cell, 0.0), float(match.group(1)))

    for finding in findings:
        if finding.probe is not None:
            keep((distribution(finding.probe.case), size(finding.probe.case)), finding.title)
        others = dict(finding.evidence).get("other failing cases")
        for other in others if isinstance(others, list) else []:
            if isinstance(other, dict) and isinstance(other.get("case"), str):
                keep(_variant_cell(other["case"]), other.get("title", ""))
    return found


def _variant_cell(variant: str) -> tuple[str, str]:
    """The cell of a variant as the evidence names it: "ids~zipf @ workload 0 [float16]"."""
    where, _, rest = variant.partition(" @ ")
    return where, re.sub(r" \[[^\]]*\]$", "", rest)


def _is_shrunk(case: Case) -> bool:
    return case.label.endswith("(shrunk)")
