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
from pathlib import Path
from typing import Any

import pytest
from running_corpora import (
    IDENTITY,
    alive,
    candidate,
    environment,
    processes_mentioning,
    rows,
    start_run,
)

from kernelaudit.cli import main
from kernelaudit.corpus import command as corpus_command
from kernelaudit.corpus.cluster import run_ray
from kernelaudit.corpus.store import Store
from kernelaudit.errors import UsageError
from kernelaudit.runner.auditor.sandbox import Isolation

FAST = ["--profile", "quick", "--checks", "tripwires", "--device", "cpu"]
KILLS_ITS_AUDITOR = """
import os
import signal
import sys

# importing this problem kills the process that audits it (as the OOM killer would)
print("the reference is out of memory", file=sys.stderr, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""

pytestmark = pytest.mark.slow


def _corpus(root: Path) -> Path:
    """Four jobs, in this order on one slot: two identity candidates, a problem whose import
    kills the slot, one more identity candidate."""
    for name, candidates in (("a_identity", ("first", "second")), ("c_identity", ("fourth",))):
        (root / name).mkdir(parents=True)
        shutil.copy(IDENTITY, root / name / "problem.py")
        for function in candidates:
            candidate(root / name / "candidates", function)
    (root / "b_killer").mkdir()
    (root / "b_killer" / "problem.py").write_text(KILLS_ITS_AUDITOR)
    candidate(root / "b_killer" / "candidates", "third")
    return root


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc")
def test_a_run_killed_with_sigkill_resumes_without_redoing_finished_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = _corpus(tmp_path / "corpus")
    db = tmp_path / "results.sqlite"
    argv = ["corpus", str(corpus), "--db", str(db), "--workers", "2", *FAST]
    run = start_run(argv)
    deadline = time.monotonic() + 60
    before: dict[str, dict[str, Any]] = {}
    while not before and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.05)
        # the write-ahead log appears once the run has set the database up
        if db.with_name(f"{db.name}-wal").exists():
            with contextlib.suppress(sqlite3.OperationalError):  # no table yet
                before = rows(db)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    # a job may have been stored between the last look and the kill: what the store holds
    # once nothing can write to it any more is what must survive
    before = rows(db) if before else before
    assert before, "no job finished within 60 s"
    assert len(before) < 4, "every job finished before the kill: nothing left to resume"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (
        processes_mentioning("kernelaudit.corpus.slot", f"--parent {run.pid}")
        or processes_mentioning("kernelaudit.runner.worker.main", str(corpus))
    ):
        time.sleep(0.1)
    assert not processes_mentioning("kernelaudit.corpus.slot", f"--parent {run.pid}")
    assert not processes_mentioning("kernelaudit.runner.worker.main", str(corpus))

    capsys.readouterr()
    assert main(argv) == 1  # the killer's job ends in a crash
    out = " ".join(capsys.readouterr().out.split())
    assert f"4 job(s) in {corpus}: {len(before)} already in" in out

    after = rows(db)
    assert sorted(after) == ["first", "fourth", "second", "third"]
    assert all(row["attempts"] == 1 for row in after.values())
    for name, row in before.items():
        assert after[name]["finished_at"] == row["finished_at"]
    assert [after[n]["verdict"] for n in ("first", "second", "fourth")] == ["PASS"] * 3
    # tried twice (in this run, or once before the kill), then stored with its slot's last words,
    # however the kill fell between its tries
    assert after["third"]["status"] == "crash"
    assert "died" in after["third"]["error"]
    assert after["third"]["error"].endswith("the reference is out of memory")
    reports = tmp_path / "results-reports"
    assert {p.name for p in reports.glob("*.json")} == {
        f"{row['key'][:12]}.json" for row in after.values() if row["status"] == "done"
    }
    pages = {p.name for p in reports.glob("*.html")}
    assert len(pages - {"index.html"}) == 3
    # the index lists every job of the summary, the crashed one among them, linked to its page
    index = (reports / "index.html").read_text()
    assert all(page in index for page in pages - {"index.html"}) and "crash" in index

    # a third run finds everything done; --summary-only reads the same store
    capsys.readouterr()
    assert main(argv) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "4 already in" in out and "0 to audit" in out
    assert rows(db) == after
    assert main(["corpus", "--summary-only", "--db", str(db)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "b_killer / third.py::third (crash):" in out


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
        env=environment(),
    )
    assert launcher.stdout is not None
    slot = int(launcher.stdout.readline())
    assert launcher.stdout.readline().strip() == '{"ready": true}'
    time.sleep(0.5)  # the slot is importing the slow problem
    assert alive(slot)
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + 3
    while alive(slot) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(slot)


def _one_job(root: Path) -> Path:
    """A manifest of one job: the identity problem and a copying candidate."""
    shutil.copy(IDENTITY, root / "identity.py")
    candidate(root, "copy")
    manifest = root / "jobs.jsonl"
    manifest.write_text(json.dumps({"problem": "identity.py", "candidate": "copy.py::copy"}))
    return manifest


def test_rerun_audits_finished_jobs_again(tmp_path: Path) -> None:
    manifest = _one_job(tmp_path)
    db = tmp_path / "results.sqlite"
    argv = ["corpus", str(manifest), "--db", str(db), *FAST]
    assert main(argv) == 0
    (first,) = rows(db).values()

    assert main([*argv, "--rerun-errors"]) == 0
    assert rows(db) == {"copy": first}
    assert main([*argv, "--rerun"]) == 0
    (again,) = rows(db).values()
    assert again["attempts"] == 2
    assert again["finished_at"] > first["finished_at"]


def test_ray_missing_is_a_usage_error_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UsageError, match=re.escape("pip install 'kernelaudit[ray]'")):
        run_ray([], "auto", "cpu", "quick", None, lambda result: None, Store(tmp_path / "c.db"))


def test_summary_only_needs_an_existing_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["corpus", "--summary-only", "--db", str(tmp_path / "none.sqlite")]) == 2
    assert "none.sqlite does not exist" in " ".join(capsys.readouterr().err.split())


def test_strict_refuses_a_corpus_where_no_sandbox_can_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        corpus_command, "isolation", lambda: Isolation("none", "bubblewrap is not installed")
    )
    manifest = _one_job(tmp_path)
    db = tmp_path / "results.sqlite"
    assert main(["corpus", str(manifest), "--db", str(db), "--strict", *FAST]) == 2
    assert "bubblewrap is not installed" in " ".join(capsys.readouterr().err.split())
    assert not db.exists()


def test_a_check_that_cannot_run_on_the_slots_devices_is_refused_before_any_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = _one_job(tmp_path)
    db = tmp_path / "results.sqlite"
    argv = ["corpus", str(manifest), "--db", str(db), "--profile", "quick", "--device", "cpu"]
    assert main([*argv, "--checks", "races"]) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "--checks names 'races', which cannot run here (cpu" in said
    assert not db.exists()


def test_what_the_jobs_could_not_verify_is_said_and_strict_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # --strict's refusal of a machine without a sandbox is another test's
    monkeypatch.setattr(corpus_command, "isolation", lambda: Isolation("bubblewrap"))
    manifest = _one_job(tmp_path)
    # on a CPU the kernels check sees only whether a Triton candidate launches its kernels
    argv = ["corpus", str(manifest), "--profile", "quick", "--device", "cpu"]
    argv += ["--checks", "tripwires,kernels"]
    assert main([*argv, "--db", str(tmp_path / "a.sqlite")]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "not verified on cpu: kernels (needs a CUDA device for the rest" in said
    assert main([*argv, "--db", str(tmp_path / "b.sqlite"), "--strict"]) == 1
    said = " ".join(capsys.readouterr().out.split())
    assert "--strict: exiting 1 because some checks could not run, settle or run in full" in said
