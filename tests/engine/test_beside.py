"""The auditor's own work beside an audit (the report's drawing library imported ahead) is
over before anything is measured, and what it raises is nobody's failure."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kernelaudit.engine import beside, executor
from kernelaudit.engine.audit import audit

ROW_SCALE = Path(__file__).parents[1] / "checks" / "fixtures"


def test_settling_waits_for_every_work_started_beside() -> None:
    ended: list[str] = []
    beside.start(lambda: (time.sleep(0.3), ended.append("slow")), "slow")
    beside.start(lambda: ended.append("quick"), "quick")
    beside.settle()
    assert sorted(ended) == ["quick", "slow"]


def test_an_error_in_work_beside_is_dropped_quietly(capfd: pytest.CaptureFixture[str]) -> None:
    thread = beside.start(lambda: 1 / 0, "broken")
    beside.settle()
    assert not thread.is_alive()
    # no traceback in the middle of the audit's progress: the code that needs the work's
    # result meets the error again where it can say what went wrong
    assert "ZeroDivisionError" not in capfd.readouterr().err


def test_the_reference_is_timed_only_once_work_beside_has_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    measuring, ended = threading.Event(), threading.Event()
    timed_while_busy: list[bool] = []
    real = executor.Executor._measure_reference

    def measured(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        measuring.set()
        timed_while_busy.append(not ended.is_set())
        return real(self, *args, **kwargs)

    def busy() -> None:
        # busy until the reference is timed, or for 3 s where the timing waits for it
        measuring.wait(timeout=3.0)
        ended.set()

    monkeypatch.setattr(executor.Executor, "_measure_reference", measured)
    beside.start(busy, "busy")
    report = audit(
        ROW_SCALE / "row_scale.py",
        f"{ROW_SCALE / 'row_scale_kernels.py'}::scale",
        "quick",
        "cpu",
        ["timing"],
    )
    assert report.verdict == "PASS"
    assert timed_while_busy and not any(timed_while_busy)
