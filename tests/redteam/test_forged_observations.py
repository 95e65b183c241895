"""Candidates that rebind, in their own process, what the worker observes around their calls.
The calls' inputs and output slots lie in memory the auditor maps too (`runner.boundary.arena`:
shared memory on a CPU, device memory it lends the worker on a GPU), and the auditor reads their
guard bands and inputs there itself (`runner.auditor.observed`): each forgery ends in FAIL for the
candidate, for the reason it hid."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelaudit.engine.audit import audit
from kernelaudit.findings import AuditReport
from kernelaudit.problem.load import load_problem

FIXTURES = Path(__file__).parent / "fixtures"


def _audit(candidate: str, device: str) -> AuditReport:
    problem = load_problem(FIXTURES / "problem" / "double.py")
    spec = f"{FIXTURES / 'candidates' / candidate}.py::double"
    return audit(problem, spec, "quick", device, ["numerics", "execution", "bounds", "mutation"])


@pytest.mark.parametrize(
    ("candidate", "check"),
    [
        ("forges_its_guard_check", "bounds"),
        ("forges_its_input_snapshot", "mutation"),
        ("forges_its_placement", "execution"),
    ],
)
def test_a_forged_observation_fails_for_what_it_hid(
    candidate: str, check: str, device: str
) -> None:
    report = _audit(candidate, device)
    assert report.verdict == "FAIL"
    assert check in {f.check for f in report.failures}, [f.title for f in report.failures]


def _timed(candidate: str, device: str) -> AuditReport:
    problem = load_problem(FIXTURES / "problem" / "double.py")
    spec = f"{FIXTURES / 'candidates' / candidate}.py::double"
    return audit(problem, spec, "quick", device, ["timing"])


@pytest.mark.parametrize(
    ("candidate", "key"),
    [
        ("forges_its_clock", "clock-disagrees"),
        ("forges_its_timing", "clock-repeats-differ"),
        ("forges_its_timing_crudely", "clock-tampered"),
        ("wrong_back_to_back", "clock-repeats-differ"),
        ("raises_after_many_calls", "clock-failed"),
        # reads the worker's frames to slow the clock's base alone: the decision to repeat
        # reaches the worker only once the call is made
        ("delays_the_clocks_base", "clock-disagrees"),
    ],
)
def test_a_forged_timing_fails_on_the_auditors_clock(candidate: str, key: str, device: str) -> None:
    report = _timed(candidate, device)
    assert report.verdict == "FAIL"
    keys = {f.key for f in report.failures if f.check == "timing"}
    assert key in keys, [f.title for f in report.failures]


def test_a_slow_honest_candidate_agrees_with_the_auditors_clock(device: str) -> None:
    report = _timed("slow_and_honest", device)
    assert report.verdict == "PASS", [f.title for f in report.failures]
    (times,) = [f for f in report.findings if f.check == "timing" and f.key == "times"]
    clocked = dict(times.evidence)["auditor's clock"]
    assert clocked["results_read"]
    # 20 ms a call, give or take what a busy host adds to one invocation of five calls
    assert 0.005 < clocked["per_call_s"] < 0.2


def test_a_kernel_wrong_after_many_calls_fails_in_the_calls_made_for_the_clock(
    device: str,
) -> None:
    # right for its first 300 calls in a process: the timed run makes about 200, the calls
    # back to back for the auditor's clock thousands more, read by the auditor
    report = _timed("wrong_after_many_calls", device)
    assert report.verdict == "FAIL"
    keys = {f.key for f in report.failures if f.check == "timing"}
    assert keys & {"clock-repeats-differ", "clock-output:y"}, [f.title for f in report.failures]


def _times(report: AuditReport) -> tuple[str, dict[str, object]]:
    (times,) = [f for f in report.findings if f.check == "timing" and f.key == "times"]
    return times.title, dict(times.evidence)


def test_a_call_that_slows_down_after_it_was_timed_is_timed_again_not_failed(
    device: str,
) -> None:
    # a host that got busy between the timing probe and the auditor's clock: both clocks see
    # the slower calls once the worker times the call again next to them
    report = _timed("slows_down_after_its_timing", device)
    assert report.verdict == "PASS", [f.title for f in report.failures]
    title, evidence = _times(report)
    assert "timed again next to the auditor's clock" in title
    # the slower figure is the one reported: 4 ms a call, not 0.2
    assert evidence["candidate"]["median_s"] > 2e-3


def test_a_clock_forged_only_while_first_timed_gains_nothing(device: str) -> None:
    report = _timed("forges_its_clock_once", device)
    title, evidence = _times(report)
    # the call timed again tells the truth, and the truth is what the report quotes: 5 ms
    assert "timed again next to the auditor's clock" in title, title
    assert evidence["candidate"]["median_s"] > 4e-3
    assert "first 1 us" in title or "first 0" in title, title
    warned = {f.key for f in report.findings if f.check == "timing" and f.severity == "warn"}
    assert "clock-timed-again-slower" in warned
