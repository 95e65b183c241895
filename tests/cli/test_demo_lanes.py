"""`kernelaudit demo` in lanes, as a newcomer's machine with two cores runs it: every example's
verdict, the time left said as problems end, the reports whole (each report's HTML section
drawn in its lane), and the table of what each example expects."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelaudit.cli import main
from kernelaudit.findings import AuditReport
from kernelaudit.report.html import page

FIXTURES = Path(__file__).parents[1] / "engine" / "fixtures"


def example(root: Path, name: str, fixture: str, expected: list[dict[str, str]]) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / fixture, folder / "problem.py")
    (folder / "expected.json").write_text(json.dumps({"candidates": expected}))


@pytest.mark.slow
def test_the_demo_in_two_lanes_says_the_time_left_and_writes_whole_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    examples = tmp_path / "examples"
    example(
        examples,
        "add",
        "plain_add.py",
        [
            {"candidate": "problem.py::summed", "verdict": "PASS"},
            {"candidate": "problem.py::subtracted", "verdict": "FAIL", "check": "numerics"},
        ],
    )
    example(
        examples,
        "scale",
        "recorded_inputs.py",
        [
            {"candidate": "problem.py::doubled", "verdict": "PASS"},
            {"candidate": "problem.py::tripled", "verdict": "FAIL", "check": "numerics"},
        ],
    )
    report = tmp_path / "demo.json"
    code = main(["demo", "--examples", str(examples), "--lanes", "2", "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "in 2 lanes" in out
    # each arrival but the last says what is left
    assert out.count("candidates audited, about ") + out.count("past the time expected") == 3
    assert "4 of 4 candidates audited" in out
    assert "every example behaved as expected" in out
    documents = json.loads(report.read_text())["reports"]
    assert [d["verdict"] for d in documents] == ["PASS", "FAIL", "PASS", "FAIL"]
    # the page put together from the lanes' sections is the page the reports make whole
    reports = [AuditReport.from_json(d) for d in documents]
    assert report.with_suffix(".html").read_text() == page(reports)
