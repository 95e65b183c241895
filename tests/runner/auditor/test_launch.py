"""Every process that runs a candidate is started and ended by one launcher: whatever it
leaves behind ends with it, also when it exits on its own first."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from kernelaudit.runner.auditor import sandbox
from kernelaudit.runner.auditor.launch import end_group, run_python, start_python
from kernelaudit.runner.auditor.limits import exited, until_exit
from kernelaudit.runner.auditor.sandbox import Isolation

LEAVES_A_SLEEPER = """
import subprocess, sys
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open("sleeper.pid", "w").write(str(sleeper.pid))
"""


def _state(pid: int) -> str:
    """The process's state letter, "" when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    return _state(pid) not in ("", "Z")


def _candidate(folder: Path, source: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A candidate file run unconfined, so that the pids it and its children have are the
    host's (a sandbox's own PID namespace would end what it leaves behind by itself)."""
    monkeypatch.setattr(sandbox, "isolation", lambda: Isolation("none", "a test's host pids"))
    candidate = folder / "candidate.py"
    candidate.write_text(source)
    return candidate


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_child_that_exits_leaving_a_process_behind_takes_it_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    candidate = _candidate(tmp_path, LEAVES_A_SLEEPER, monkeypatch)
    ended = run_python([str(candidate)], "cpu", 60.0, candidate, tmp_path)
    assert ended.returncode == 0 and not ended.timed_out
    sleeper = int((tmp_path / "sleeper.pid").read_text())
    deadline = time.monotonic() + 10.0  # SIGKILL takes effect asynchronously
    while _alive(sleeper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(sleeper)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_child_is_read_as_ended_without_being_reaped_until_its_group_is_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    candidate = _candidate(tmp_path, "raise SystemExit(3)\n", monkeypatch)
    child = start_python([str(candidate)], "cpu", candidate, tmp_path)
    until_exit(child, 60.0)
    assert exited(child) == 3
    # still the child's own pid, so its group's id cannot be another process's yet
    assert _state(child.pid) == "Z" and child.returncode is None
    end_group(child)
    assert child.returncode == 3 and _state(child.pid) == ""


def test_a_child_reaped_already_is_not_signalled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    candidate = _candidate(tmp_path, "", monkeypatch)
    child = start_python([str(candidate)], "cpu", candidate, tmp_path)
    child.wait()
    signalled: list[int] = []
    monkeypatch.setattr(os, "killpg", lambda pid, sig: signalled.append(pid))
    end_group(child)
    assert signalled == []
