"""`kernelaudit check --junit FILE --sarif FILE`: the audit's results where a CI system reads
them, beside the JSON and HTML reports."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kernelaudit.cli import main

ROOT = Path(__file__).parents[1]
PROBLEM = ROOT / "problem" / "fixtures" / "good.py"
CANDIDATES = Path(__file__).parent / "fixtures" / "candidates.py"


def test_check_writes_a_junit_case_per_candidate_and_sarif(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit, sarif, report = tmp_path / "ci" / "junit.xml", tmp_path / "r.sarif", tmp_path / "r.json"
    code = main(
        [
            "check",
            str(PROBLEM),
            f"{CANDIDATES}::scale",
            f"{CANDIDATES}::scale_in_half",
            *("--profile", "quick", "--device", "cpu", "--checks", "execution,numerics"),
            *("--json", str(report), "--junit", str(junit), "--sarif", str(sarif)),
        ]
    )
    assert code == 1
    said = capsys.readouterr().out
    assert f"JUnit XML: {junit}" in said and f"SARIF: {sarif}" in said
    root = ET.parse(junit).getroot()
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert set(cases) == {"candidates.py::scale", "candidates.py::scale_in_half"}
    assert cases["candidates.py::scale"].find("failure") is None
    failure = cases["candidates.py::scale_in_half"].find("failure")
    assert failure is not None and f"kernelaudit repro {report} " in (failure.text or "")
    assert json.loads(sarif.read_text())["version"] == "2.1.0"
