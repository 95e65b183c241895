"""`kernelaudit check` reads and hashes the problem's and the candidates' files before any
candidate runs, and a file that changed by the end of a candidate's audit fails it, naming the
file: no verdict stands on bytes other than the ones the command was given. Without a sandbox a
candidate can write them; under one it cannot."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelaudit.cli import main
from kernelaudit.runner.auditor.sandbox import SANDBOX_SWITCH, isolation

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def unconfined(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Candidates run without the sandbox, where nothing stops them writing."""
    monkeypatch.setenv(SANDBOX_SWITCH, "off")
    isolation.cache_clear()
    yield
    isolation.cache_clear()  # the next test finds out for itself


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES, tmp_path / "fixtures")
    return tmp_path / "fixtures"


def _command(root: Path, candidate: str, report: Path) -> list[str]:
    spec = f"{root / 'candidates' / candidate}.py::double"
    return [
        "check",
        str(root / "problem" / "double.py"),
        spec,
        "--profile",
        "quick",
        "--device",
        "cpu",
        "--checks",
        "numerics,execution",
        "--json",
        str(report),
    ]


def _findings(report: Path) -> list[dict]:
    return json.loads(report.read_text())["reports"][0]["findings"]


@pytest.mark.parametrize(
    ("candidate", "changed"),
    [("rewrites_itself", "candidates/rewrites_itself.py"), ("plants_files", "problem/double.py")],
)
@pytest.mark.usefixtures("unconfined")
def test_a_file_changed_during_the_audit_fails_it_and_is_named(
    tmp_path: Path, candidate: str, changed: str
) -> None:
    root = _copy(tmp_path)
    report = tmp_path / "report.json"
    assert main(_command(root, candidate, report)) == 1
    findings = _findings(report)
    assert findings[0]["key"] == "files-changed"
    assert str(root / changed) in findings[0]["title"]
    assert json.loads(report.read_text())["reports"][0]["verdict"] == "FAIL"


@pytest.mark.usefixtures("unconfined")
def test_files_that_stay_as_read_give_the_audits_own_verdict(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    (root / "candidates" / "honest.py").write_text("def double(x):\n    return x * 2\n")
    report = tmp_path / "report.json"
    assert main(_command(root, "honest", report)) == 0
    assert _findings(report) == []


@pytest.mark.skipif(
    not isolation().confined, reason=f"no sandbox on this machine: {isolation().reason}"
)
def test_under_the_sandbox_a_candidate_cannot_rewrite_its_own_file(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    before = (root / "candidates" / "rewrites_itself.py").read_bytes()
    report = tmp_path / "report.json"
    assert main(_command(root, "rewrites_itself", report)) == 0
    assert (root / "candidates" / "rewrites_itself.py").read_bytes() == before


def test_the_command_reads_the_files_before_its_first_worker_starts(tmp_path: Path) -> None:
    """The command starts its first candidate's worker before it imports torch: the files are
    read before that worker runs the candidate's import."""
    root = _copy(tmp_path)
    report = tmp_path / "report.json"
    env = {**os.environ, SANDBOX_SWITCH: "off"}
    done = subprocess.run(
        [sys.executable, "-m", "kernelaudit", *_command(root, "rewrites_itself", report)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert _findings(report)[0]["key"] == "files-changed"
