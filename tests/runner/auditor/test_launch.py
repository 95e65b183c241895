"""Every process that runs a candidate is started and ended by one launcher: whatever it
leaves behind ends with it, also when it exits on its own first."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from kernelaudit.runner.auditor import sandbox
from kernelaudit.runner.auditor.launch import run_python
from kernelaudit.runner.auditor.sandbox import Isolation

LEAVES_A_SLEEPER = """
import subprocess, sys
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open("sleeper.pid", "w").write(str(sleeper.pid))
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_child_that_exits_leaving_a_process_behind_takes_it_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # unconfined, so that the pid the child writes is the host's (a sandbox's own PID
    # namespace would end the sleeper by itself)
    monkeypatch.setattr(sandbox, "isolation", lambda: Isolation("none", "a test's host pids"))
    candidate = tmp_path / "candidate.py"
    candidate.write_text(LEAVES_A_SLEEPER)
    ended = run_python([str(candidate)], "cpu", 60.0, candidate, tmp_path)
    assert ended.returncode == 0 and not ended.timed_out
    sleeper = int((tmp_path / "sleeper.pid").read_text())
    deadline = time.monotonic() + 10.0  # SIGKILL takes effect asynchronously
    while _alive(sleeper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(sleeper)
