"""Audits in a kernel project's own test suite, as its developers write them: the pytest
plugin's marker and fixtures, `kernelaudit.testing.assert_passes`, the run's command-line
options, the reports gathered in one folder, and pytest-xdist."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).parents[1]
PROBLEM = ROOT / "problem" / "fixtures" / "good.py"
CANDIDATES = ROOT / "cli" / "fixtures" / "candidates.py"
CHECKS = '["execution", "numerics"]'

SUITE = f"""
import pytest
from kernelaudit.testing import assert_passes

PROBLEM = {str(PROBLEM)!r}
CANDIDATES = {str(CANDIDATES)!r}


@pytest.mark.kernelaudit(PROBLEM, CANDIDATES + "::scale", checks={CHECKS}, device="cpu")
def test_scale(kernelaudit_report):
    assert kernelaudit_report.verdict == "PASS"


@pytest.mark.kernelaudit(checks={CHECKS}, device="cpu")
def test_scale_beside_this_file(kernelaudit_audit):
    # paths relative to this test's folder, wherever pytest runs from
    assert kernelaudit_audit("good.py", "candidates.py::scale").verdict == "PASS"


def test_scale_through_the_function():
    report = assert_passes(PROBLEM, CANDIDATES + "::scale", "default", checks={CHECKS},
                           device="cpu")
    assert report.profile == "quick"  # the command line's profile wins
"""

FAILING = f"""
import pytest
from kernelaudit.testing import AuditFailed

@pytest.mark.kernelaudit(
    problem={str(PROBLEM)!r}, candidate={str(CANDIDATES)!r} + "::scale_in_half",
    checks={CHECKS}, device="cpu",
)
def test_scale_in_half(kernelaudit_report):
    pass
"""


def _suite(pytester: pytest.Pytester) -> None:
    """The suite in a folder of its own, beside copies of the problem and the candidates."""
    folder = pytester.mkdir("kernels")
    (folder / "test_kernels.py").write_text(SUITE)
    (folder / "good.py").write_text(PROBLEM.read_text())
    (folder / "candidates.py").write_text(CANDIDATES.read_text())


@pytest.mark.slow
def test_passing_audits_print_nothing_but_pytests_own_output(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    reports = pytester.path / "audits"
    reports.mkdir()
    (reports / "from-an-earlier-run.json").write_text("{}")  # not this run's: not indexed
    os.utime(reports / "from-an-earlier-run.json", (0, 0))
    run = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--kernelaudit-profile", "quick",
        "--kernelaudit-reports", str(reports), "kernels",
    )  # fmt: skip
    run.assert_outcomes(passed=3)
    said = [line for line in run.outlines if line.strip()]
    assert [line.split()[0] for line in said[:-1]] == ["..."]  # the three tests' dots alone
    assert said[-1].startswith("3 passed")
    index = json.loads((reports / "index.json").read_text())["audits"]
    assert sorted(a["candidate"] for a in index) == ["candidates.py::scale"] * 3
    assert {a["verdict"] for a in index} == {"PASS"}
    assert (reports / "index.html").is_file()


@pytest.mark.slow
def test_a_failing_audit_fails_its_test_with_the_findings_and_the_replay(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_kernels=FAILING)
    reports = pytester.path / "audits"
    run = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--kernelaudit-reports", str(reports)
    )
    run.assert_outcomes(errors=1)
    text = run.stdout.str()
    assert "kernelaudit: candidates.py::scale_in_half FAIL on scale (quick profile, cpu" in text
    assert "smallest failing case" in text
    (written,) = [p for p in reports.glob("*.json") if p.name != "index.json"]
    assert f"replay: kernelaudit repro {written}" in text
    (audit,) = json.loads((reports / "index.json").read_text())["audits"]
    assert audit["verdict"] == "FAIL" and "numerics" in audit["failing_checks"]


@pytest.mark.slow
def test_audits_share_the_host_under_xdist(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    pytester.makepyfile(test_failing=FAILING)
    reports = pytester.path / "audits"
    junit = pytester.path / "junit.xml"
    run = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--kernelaudit-profile", "quick",
        "--kernelaudit-reports", str(reports), "--junitxml", str(junit),
    )  # fmt: skip
    run.assert_outcomes(passed=3, errors=1)
    # pytest's own JUnit XML carries the failing audit's findings
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    assert len(cases) == 4
    (broken,) = [c for c in cases if c.find("error") is not None]
    text = (broken.find("error").text or "") + (broken.find("error").get("message") or "")  # type: ignore[union-attr]
    assert "kernelaudit: candidates.py::scale_in_half FAIL on scale" in text
    index = json.loads((reports / "index.json").read_text())["audits"]
    assert sorted(a["verdict"] for a in index) == ["FAIL", "PASS", "PASS", "PASS"]
    # each process wrote its own reports, named by the test and the process
    assert {p.name.split("-")[-2] for p in reports.glob("test_*.json")} <= {"gw0", "gw1"}


def test_a_marker_without_a_candidate_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_kernels=f"""
import pytest

@pytest.mark.kernelaudit(problem={str(PROBLEM)!r})
def test_missing(kernelaudit_report):
    pass
"""
    )
    run = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert "names a problem and a candidate" in run.stdout.str() + run.stderr.str()
    assert run.ret != 0


UNVERIFIED = f"""
from kernelaudit.testing import assert_passes

def test_scale_with_a_race_check():
    assert_passes({str(PROBLEM)!r}, {str(CANDIDATES)!r} + "::scale",
                  checks=["execution", "numerics", "races"], device="cpu")
"""


@pytest.mark.slow
def test_a_pass_that_left_checks_unverified_warns_and_fails_under_strict(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_kernels=UNVERIFIED)
    run = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    run.assert_outcomes(passed=1, warnings=1)
    said = run.stdout.str()
    assert "Unverified: kernelaudit: candidates.py::scale passed on scale" in said
    assert "not verified on cpu: races (needs a CUDA device" in said
    strict = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--kernelaudit-strict")
    strict.assert_outcomes(failed=1)
    assert "--kernelaudit-strict fails a pass that left checks unverified" in strict.stdout.str()
