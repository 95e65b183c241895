"""`kernelaudit corpus` end to end on the CPU: each audit runs the tripwires check alone (a
source scan and the candidate's worker started and stopped: about two seconds), so the tests
exercise the scheduler, the slots and the store rather than the checks."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

import kernelaudit
from kernelaudit.cli import main
from kernelaudit.corpus.pool import run_ray
from kernelaudit.errors import UsageError

IDENTITY = Path(__file__).parents[1] / "checks" / "fixtures" / "identity.py"
FAST = ["--profile", "quick", "--checks", "tripwires", "--device", "cpu"]
KILLS_ITS_AUDITOR = """
import os
import re
import signal

# importing this problem kills the process that audits it (as the OOM killer would)
os.kill(os.getpid(), signal.SIGKILL)
"""

pytestmark = pytest.mark.slow


def _candidate(folder: Path, name: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(f"def {name}(x):\n    return x.clone()\n")


def _corpus(root: Path) -> Path:
    """Four jobs, in this order on one slot: two identity candidates, a problem whose import
    kills the slot, one more identity candidate."""
    for name, candidates in (("a_identity", ("first", "second")), ("c_identity", ("fourth",))):
        (root / name).mkdir(parents=True)
        shutil.copy(IDENTITY, root / name / "problem.py")
        for candidate in candidates:
            _candidate(root / name / "candidates", candidate)
    (root / "b_killer").mkdir()
    (root / "b_killer" / "problem.py").write_text(KILLS_ITS_AUDITOR)
    _candidate(root / "b_killer" / "candidates", "third")
    return root


def _rows(db: Path) -> dict[str, dict[str, Any]]:
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.row_factory = sqlite3.Row
        rows = connection.execute("SELECT * FROM results").fetchall()
    return {row["candidate"].rpartition("::")[2]: dict(row) for row in rows}


def _processes_mentioning(*words: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if all(word in command for word in words):
            found.append(command)
    return found


def _environment() -> dict[str, str]:
    source = str(Path(kernelaudit.__file__).parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])}


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc")
def test_a_run_killed_with_sigkill_resumes_without_redoing_finished_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = _corpus(tmp_path / "corpus")
    db = tmp_path / "results.sqlite"
    argv = ["corpus", str(corpus), "--db", str(db), "--workers", "2", *FAST]
    run = subprocess.Popen(
        [sys.executable, "-m", "kernelaudit.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=_environment(),
    )
    deadline = time.monotonic() + 60
    before: dict[str, dict[str, Any]] = {}
    while not before and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.05)
        # the write-ahead log appears once the run has set the database up
        if db.with_name(f"{db.name}-wal").exists():
            with contextlib.suppress(sqlite3.OperationalError):  # no table yet
                before = _rows(db)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    # a job may have been stored between the last look and the kill: what the store holds
    # once nothing can write to it any more is what must survive
    before = _rows(db) if before else before
    assert before, "no job finished within 60 s"
    assert len(before) < 4, "every job finished before the kill: nothing left to resume"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (
        _processes_mentioning("kernelaudit.corpus.slot", f"--parent {run.pid}")
        or _processes_mentioning("kernelaudit.runner.worker", str(corpus))
    ):
        time.sleep(0.1)
    assert not _processes_mentioning("kernelaudit.corpus.slot", f"--parent {run.pid}")
    assert not _processes_mentioning("kernelaudit.runner.worker", str(corpus))

    capsys.readouterr()
    assert main(argv) == 1  # the killer's job ends in an error
    out = " ".join(capsys.readouterr().out.split())
    assert f"4 job(s) in {corpus}: {len(before)} already in" in out

    after = _rows(db)
    assert sorted(after) == ["first", "fourth", "second", "third"]
    assert all(row["attempts"] == 1 for row in after.values())
    for name, row in before.items():
        assert after[name]["finished_at"] == row["finished_at"]
    assert [after[n]["verdict"] for n in ("first", "second", "fourth")] == ["PASS"] * 3
    assert after["third"]["status"] == "error"
    assert after["third"]["error"].startswith("the audit process died (killed by SIGKILL)")
    reports = tmp_path / "results-reports"
    assert {p.name for p in reports.glob("*.json")} == {
        f"{row['key'][:12]}.json" for row in after.values() if row["status"] == "done"
    }
    assert len(list(reports.glob("*.html"))) == 3

    # a third run finds everything done; --summary-only reads the same store
    capsys.readouterr()
    assert main(argv) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "4 already in" in out and "0 to audit" in out
    assert _rows(db) == after
    assert main(["corpus", "--summary-only", "--db", str(db)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "b_killer / third.py::third: the audit process died" in out


SLOT_LAUNCHER = """
import json, os, subprocess, sys, time

slot = subprocess.Popen(
    [sys.executable, "-m", "kernelaudit.corpus.slot", "--parent", str(os.getpid()),
     "--device", "cpu", "--profile", "quick"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
)
print(slot.pid, flush=True)
slot.stdin.write(json.dumps({"key": "k", "problem": sys.argv[1], "candidate": "k.py::f"}) + "\\n")
slot.stdin.flush()
print(slot.stdout.readline().strip(), flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc")
def test_a_busy_slot_ends_when_its_parent_is_killed(tmp_path: Path) -> None:
    # the slot's stdin stays open in no one's hands for as long as the job runs: only its
    # watch on the parent can end it
    slow = tmp_path / "slow.py"
    slow.write_text("import time\n\ntime.sleep(60)\n")
    launcher = subprocess.Popen(
        [sys.executable, "-c", SLOT_LAUNCHER, str(slow)],
        stdout=subprocess.PIPE,
        text=True,
        env=_environment(),
    )
    assert launcher.stdout is not None
    slot = int(launcher.stdout.readline())
    assert launcher.stdout.readline().strip() == '{"ready": true}'
    time.sleep(0.5)  # the slot is importing the slow problem
    assert _alive(slot)
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + 3
    while _alive(slot) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(slot)


def test_rerun_audits_finished_jobs_again(tmp_path: Path) -> None:
    problem = tmp_path / "identity.py"
    shutil.copy(IDENTITY, problem)
    _candidate(tmp_path, "copy")
    manifest = tmp_path / "jobs.jsonl"
    manifest.write_text(json.dumps({"problem": "identity.py", "candidate": "copy.py::copy"}))
    db = tmp_path / "results.sqlite"
    argv = ["corpus", str(manifest), "--db", str(db), *FAST]
    assert main(argv) == 0
    (first,) = _rows(db).values()

    assert main([*argv, "--rerun-errors"]) == 0
    assert _rows(db) == {"copy": first}
    assert main([*argv, "--rerun"]) == 0
    (again,) = _rows(db).values()
    assert again["attempts"] == 2
    assert again["finished_at"] > first["finished_at"]


class _Ref:
    def __init__(self, value: Any) -> None:
        self.value = value


class _FakeRay(types.ModuleType):
    """Ray's API as the corpus uses it, with every task run in this process at submission."""

    def __init__(self) -> None:
        super().__init__("ray")
        self.address: str | None = None
        self.num_gpus: list[int] = []

    def init(self, address: str) -> None:
        self.address = address

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2.0}

    def remote(self, num_gpus: int) -> Any:
        self.num_gpus.append(num_gpus)

        def wrap(function: Any) -> Any:
            return types.SimpleNamespace(remote=lambda *args: _Ref(function(*args)))

        return wrap

    def wait(self, refs: list[Any], num_returns: int) -> tuple[list[Any], list[Any]]:
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref: _Ref) -> Any:
        return ref.value


def test_ray_tasks_store_their_results_like_local_slots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(IDENTITY, tmp_path / "identity.py")
    (tmp_path / "broken.py").write_text("problem = 3\n")
    _candidate(tmp_path, "copy")
    manifest = tmp_path / "jobs.json"
    manifest.write_text(
        json.dumps(
            [
                {"problem": "identity.py", "candidate": "copy.py::copy"},
                {"problem": "broken.py", "candidate": "copy.py::copy"},
            ]
        )
    )
    ray = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    db = tmp_path / "results.sqlite"

    assert main(["corpus", str(manifest), "--db", str(db), "--ray", "auto", *FAST]) == 1

    assert (ray.address, ray.num_gpus) == ("auto", [0])
    with contextlib.closing(sqlite3.connect(db)) as connection:
        rows = connection.execute("SELECT problem, status, verdict, device, error FROM results")
        stored = {Path(problem).name: rest for problem, *rest in rows}
    assert stored["identity.py"] == ["done", "PASS", "ray:cpu", None]
    assert stored["broken.py"][:3] == ["error", None, "ray:cpu"]
    assert "`problem` is a int, not a Problem" in stored["broken.py"][3]


def test_ray_missing_is_a_usage_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UsageError, match=re.escape("pip install 'kernelaudit[ray]'")):
        run_ray([], "auto", "cpu", "quick", None, lambda result: None)


def test_summary_only_needs_an_existing_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["corpus", "--summary-only", "--db", str(tmp_path / "none.sqlite")]) == 2
    assert "none.sqlite does not exist" in " ".join(capsys.readouterr().err.split())
