"""A finding keeps the worst case it saw beside the smallest one it was shrunk to: the worst
case's numbers are what a reader must see first."""

from __future__ import annotations

import re
from pathlib import Path

from kernelaudit.engine.audit import audit

ROOT = Path(__file__).parents[1]
PROBLEM = ROOT / "problem" / "fixtures" / "good.py"
HALF = f"{ROOT / 'cli' / 'fixtures' / 'candidates.py'}::scale_in_half"


def _ratio(title: str) -> float:
    return float(re.search(r"is ([\d.]+)x the noise floor", title).group(1))  # type: ignore[union-attr]


def test_a_shrunk_finding_keeps_its_worst_case_and_lists_it_once() -> None:
    report = audit(PROBLEM, HALF, "quick", "cpu", ["execution", "numerics"])
    finding = next(f for f in report.failures if f.key.startswith("error"))
    evidence = dict(finding.evidence)
    worst = evidence["worst case"]
    assert finding.probe is not None and finding.original is not None
    assert finding.probe.case != finding.original
    assert _ratio(worst["title"]) >= _ratio(finding.title)
    # the worst case is not listed again among the other failing cases
    assert worst["case"] not in [o["case"] for o in evidence["other failing cases"]]
