"""The JUnit XML report as a CI system reads it: one test case per candidate, a failing one's
findings with their numbers and the command that replays them, what the audit could not
verify, and the candidates that could not be audited."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelaudit.findings import AuditReport, Finding, read_reports
from kernelaudit.report.junit import Unaudited, write_junit


def suite_of(path: Path) -> tuple[ET.Element, ET.Element]:
    root = ET.parse(path).getroot()
    (suite,) = root.findall("testsuite")
    return root, suite


def counts(element: ET.Element) -> dict[str, str | None]:
    return {name: element.get(name) for name in ("tests", "failures", "errors", "skipped")}


@pytest.mark.slow
def test_each_candidate_is_a_test_case_and_the_counts_add_up(checked: Path, tmp_path: Path) -> None:
    reports = read_reports(checked)
    path = tmp_path / "junit.xml"
    write_junit(reports, path, "kernelaudit check", report_path=checked)
    root, suite = suite_of(path)
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("masked_softmax", "candidates.py::guards_masked_rows"),
        ("masked_softmax", "candidates.py::nan_on_masked_rows"),
    ]
    assert [c.get("time") for c in cases] == [f"{r.seconds:.3f}" for r in reports]
    failed = sum(c.find("failure") is not None for c in cases)
    expected = {"tests": "2", "failures": "1", "errors": "0", "skipped": "0"}
    assert counts(root) == counts(suite) == expected and failed == 1
    assert suite.get("name") == "kernelaudit check"
    assert float(suite.get("time") or 0) == pytest.approx(sum(r.seconds for r in reports), abs=0.01)
    assert [p.name for p in tmp_path.iterdir()] == ["junit.xml"]  # no temporary file left


@pytest.mark.slow
def test_a_failing_candidate_shows_its_finding_numbers_smallest_case_and_replay(
    checked: Path, tmp_path: Path
) -> None:
    passing, failing = read_reports(checked)
    path = tmp_path / "junit.xml"
    write_junit([passing, failing], path, "kernelaudit check", report_path=checked)
    first, second = suite_of(path)[1].findall("testcase")
    assert first.find("failure") is None
    failure = second.find("failure")
    assert failure is not None and failure.text is not None
    finding = failing.failures[0]
    assert finding.check == "numerics" and finding.probe is not None
    assert failure.get("type") == "numerics"
    assert (failure.get("message") or "").startswith(f"{finding.id} [numerics] {finding.title}")
    text = failure.text
    assert f"seen in {finding.occurrences} of {finding.probes} numerics case(s)" in text
    assert f"smallest failing case: {finding.probe.case.describe()}" in text
    assert "  metrics: normwise: " in text  # the error figures the verdict rests on
    assert f"  replay: kernelaudit repro {checked} {finding.id}" in text


@pytest.mark.slow
def test_what_the_audit_could_not_verify_is_each_test_cases_output(
    checked: Path, tmp_path: Path
) -> None:
    path = tmp_path / "junit.xml"
    write_junit(read_reports(checked), path, "kernelaudit check")
    for case in suite_of(path)[1].findall("testcase"):
        output = case.findtext("system-out") or ""
        assert "not verified on cpu: kernels (needs a CUDA device" in output


def test_a_candidate_that_could_not_be_audited_is_an_error(
    tmp_path: Path, report: Callable[..., AuditReport]
) -> None:
    timed_out = Unaudited(
        "softmax",
        "slow.py::softmax",
        "timeout",
        "ran past --job-timeout 900 s\nits log: ...",
        900.0,
    )
    path = tmp_path / "junit.xml"
    write_junit([report()], path, "kernelaudit corpus jobs.jsonl", unaudited=[timed_out])
    root, suite = suite_of(path)
    assert (
        counts(root)
        == counts(suite)
        == {
            "tests": "2",
            "failures": "0",
            "errors": "1",
            "skipped": "0",
        }
    )
    audited, errored = suite.findall("testcase")
    assert list(audited) == []  # a clean pass says nothing more
    error = errored.find("error")
    assert error is not None
    assert (errored.get("classname"), errored.get("name")) == ("softmax", "slow.py::softmax")
    assert (error.get("type"), error.get("message")) == ("timeout", "ran past --job-timeout 900 s")
    assert error.text == "ran past --job-timeout 900 s\nits log: ..."
    assert errored.get("time") == "900.000"


def test_warnings_and_notes_are_output_not_failures(
    tmp_path: Path, report: Callable[..., AuditReport], finding: Callable[..., Finding]
) -> None:
    tripwire = finding("tripwires", "warn", "timer-patching at candidate.py:3: time.time = f")
    timing = finding("timing", "note", "candidate 3 ms per call", id="F2")
    path = tmp_path / "junit.xml"
    write_junit([report(tripwire, timing, isolation="none (bubblewrap is missing)")], path, "s")
    (case,) = suite_of(path)[1].findall("testcase")
    assert case.find("failure") is None
    assert (case.findtext("system-out") or "").splitlines() == [
        "warn F1 [tripwires] timer-patching at candidate.py:3: time.time = f (3 case(s))",
        "note F2 [timing] candidate 3 ms per call (3 case(s))",
        "isolation: none (bubblewrap is missing)",
    ]


def test_each_report_of_a_corpus_replays_from_its_own_file(
    tmp_path: Path, report: Callable[..., AuditReport], finding: Callable[..., Finding]
) -> None:
    failing = finding("unwritten", "fail", "'y': 1 of 17 elements are never written", probed=True)
    reports = [report(failing), report(failing, candidate="other.py::scale")]
    files = [tmp_path / "reports" / "0a1b2c3d4e5f.json", tmp_path / "reports" / "9f8e7d6c.json"]
    path = tmp_path / "junit.xml"
    write_junit(reports, path, "corpus", report_path=files)
    texts = [case.findtext("failure") or "" for case in suite_of(path)[1].findall("testcase")]
    assert [text.splitlines()[-1] for text in texts] == [
        f"  replay: kernelaudit repro {file} F1" for file in files
    ]
    with pytest.raises(ValueError, match="1 report paths for 2 reports"):
        write_junit(reports, path, "corpus", report_path=files[:1])


def test_a_finding_without_a_case_of_its_own_has_no_replay_line(
    tmp_path: Path, report: Callable[..., AuditReport], finding: Callable[..., Finding]
) -> None:
    training = finding("training", "fail", "training departs from the reference under SGD")
    path = tmp_path / "junit.xml"
    write_junit([report(training)], path, "s", report_path=tmp_path / "report.json")
    text = suite_of(path)[1].findtext("testcase/failure") or ""
    assert text.startswith("F1 [training] training departs") and "replay" not in text


def test_terminal_colours_and_nul_in_a_message_leave_the_file_readable(
    tmp_path: Path, report: Callable[..., AuditReport], finding: Callable[..., Finding]
) -> None:
    raised = finding(
        "execution",
        "fail",
        "the candidate raised \x1b[31mRuntimeError\x1b[0m",
        {"message": "bad byte \x00 here"},
    )
    path = tmp_path / "junit.xml"
    write_junit([report(raised, candidate="naïve.py::scale")], path, "s")
    (case,) = suite_of(path)[1].findall("testcase")  # parses: nothing XML cannot hold
    failure = case.find("failure")
    assert failure is not None
    assert (
        failure.get("message")
        == "F1 [execution] the candidate raised \\x1b[31mRuntimeError\\x1b[0m"
    )
    assert "message: bad byte \\x00 here" in (failure.text or "")
    assert case.get("name") == "naïve.py::scale"
