"""The demo's up-front estimate at this machine's own pace (`engine.pace`): unknown before its
first run, kept per machine and device after each run, the median of the last few."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelaudit.engine import pace
from kernelaudit.engine.pace import (
    KEPT,
    at_this_pace,
    measured_pace,
    pace_path,
    record_pace,
    recorded_pace,
)


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELAUDIT_CACHE", str(tmp_path))


def test_before_a_first_run_a_cpu_is_estimated_at_the_pace_its_measured_speed_suggests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert recorded_pace("cpu") is None
    # this machine does the measured work in twice the anchor host's time
    monkeypatch.setattr(pace, "_timed", lambda work: 2 * pace.ANCHOR_SECONDS)
    seconds, how = at_this_pace(420.0, "cpu")
    assert seconds == pytest.approx(420.0 * pace.ANCHOR_PACE * 2)
    assert how.startswith("on this machine, at the pace a short measurement of its speed")
    # a GPU's audits wait on the device as much as on the host: its first guess is the fitted one
    seconds, how = at_this_pace(420.0, "cuda:0")
    assert seconds == 420.0 and how.startswith("at the pace of the hosts the estimate was fitted")


def test_the_measured_work_is_timed_on_this_machine() -> None:
    guessed = measured_pace("cpu")
    assert guessed is not None
    # the work took between a millisecond and five seconds here
    seconds = guessed / pace.ANCHOR_PACE * pace.ANCHOR_SECONDS
    assert 0.001 < seconds < 5.0
    assert measured_pace("cuda:0") is None


def test_where_the_speed_cannot_be_measured_the_estimate_says_whose_pace_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fails() -> None:
        raise RuntimeError("the work cannot run here")

    monkeypatch.setattr(pace, "_speed_work", fails)
    seconds, how = at_this_pace(420.0, "cpu")
    assert seconds == 420.0 and how.startswith("at the pace of the hosts the estimate was fitted")
    # nor where a clock says it took no time
    monkeypatch.setattr(pace, "_timed", lambda work: 0.0)
    seconds, how = at_this_pace(420.0, "cpu")
    assert seconds == 420.0 and how.startswith("at the pace of the hosts the estimate was fitted")


def test_a_faster_machine_is_estimated_at_its_own_pace_after_a_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # estimated at 7 minutes, done in 3
    record_pace("cpu", 420.0, 180.0)
    timed: list[object] = []
    monkeypatch.setattr(pace, "_timed", timed.append)
    seconds, how = at_this_pace(420.0, "cpu")
    assert seconds == pytest.approx(180.0)
    assert how == "on this machine, at the pace of its last runs"
    assert not timed  # a recorded pace is not guessed again
    # a GPU's pace is its own
    assert recorded_pace("cuda:0") is None


def test_the_median_of_the_last_runs_is_kept() -> None:
    for run_pace in (0.1, 0.5, 3.0, 0.45, 0.5, 0.42):
        record_pace("cpu", 100.0, 100.0 * run_pace)
    # the first run (0.1) is forgotten, the slow one (a busy host, 3.0) moves nothing
    assert recorded_pace("cpu") == pytest.approx(0.5)
    assert KEPT == 5


def test_a_damaged_file_or_a_meaningless_run_is_no_pace() -> None:
    pace_path().parent.mkdir(parents=True, exist_ok=True)
    pace_path().write_text("{not json")
    assert recorded_pace("cpu") is None
    record_pace("cpu", 0.0, 10.0)
    assert recorded_pace("cpu") is None
    record_pace("cpu", 10.0, 5.0)  # written over the damaged file
    assert recorded_pace("cpu") == pytest.approx(0.5)


@pytest.mark.parametrize("kept_as", [1, 2])
def test_paces_kept_on_another_basis_are_not_read(kept_as: int) -> None:
    # format 1 summed the audits' seconds, short of the wall time where lanes end unevenly;
    # format 2's estimates left the training check's steps out, most of a GPU's demo: either
    # would misstate the next estimate
    pace_path().parent.mkdir(parents=True, exist_ok=True)
    pace_path().write_text(f'{{"format": {kept_as}, "paces": {{"h|2|cpu": [0.3]}}}}')
    assert recorded_pace("cpu") is None
    record_pace("cpu", 100.0, 40.0)
    assert recorded_pace("cpu") == pytest.approx(0.4)
