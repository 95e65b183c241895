"""A corpus run's results for a CI system: JUnit XML with one test case per job (failures
with their findings, jobs that could not be audited as errors) and SARIF, from the run and
again from the database alone."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from running_corpora import NUMERICS, candidate, identity_at

from kernelaudit.cli import main

pytestmark = pytest.mark.slow


def _suite(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    return root if root.tag == "testsuite" else root.find("testsuite")  # type: ignore[return-value]


def test_a_corpus_writes_junit_and_sarif_for_every_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "corpus"
    (root / "ident" / "candidates").mkdir(parents=True)
    (root / "ident" / "problem.py").write_text(identity_at("8", "16"))
    candidate(root / "ident" / "candidates", "dup")
    (root / "ident" / "candidates" / "doubled.py").write_text("def doubled(x):\n    return x * 2\n")
    (root / "huge").mkdir()
    (root / "huge" / "problem.py").write_text(identity_at("2**20", "2**20"))
    candidate(root / "huge" / "candidates", "dup")
    db, junit, sarif = tmp_path / "r.sqlite", tmp_path / "junit.xml", tmp_path / "r.sarif"
    argv = ["corpus", str(root), "--db", str(db), *NUMERICS]
    assert main([*argv, "--junit", str(junit), "--sarif", str(sarif)]) == 1
    # the summary names each failing candidate, its checks and its reports' name
    said = capsys.readouterr().out
    (line,) = [line for line in said.splitlines() if "ident / doubled.py::doubled:" in line]
    key = line.rsplit("(", 1)[1].rstrip(")")
    assert "numerics" in line and (db.parent / "r-reports" / f"{key}.html").is_file()

    suite = _suite(junit)
    cases = {(case.get("classname"), case.get("name")): case for case in suite.iter("testcase")}
    assert len(cases) == 3 and suite.get("tests") == "3"
    assert suite.get("failures") == "1" and suite.get("errors") == "1"
    (failing,) = [c for c in cases.values() if c.find("failure") is not None]
    assert "doubled" in (failing.get("name") or "")
    assert "kernelaudit repro" in (failing.find("failure").text or "")  # type: ignore[union-attr]
    (unaudited,) = [c for c in cases.values() if c.find("error") is not None]
    assert unaudited.get("classname") != failing.get("classname")  # the huge problem's job

    document = json.loads(sarif.read_text())
    assert document["version"] == "2.1.0" and document["runs"][0]["tool"]["driver"]["name"]

    # the database alone gives the same test cases
    again = tmp_path / "again.xml"
    assert main(["corpus", "--summary-only", "--db", str(db), "--junit", str(again)]) == 1
    assert {(c.get("classname"), c.get("name")) for c in _suite(again).iter("testcase")} == set(
        cases
    )
