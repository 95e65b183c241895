"""`kernelaudit corpus` when jobs hang or take their audit process (or the whole run) down with
them: time limits, jobs in flight across runs, retries that end."""

from __future__ import annotations

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

import pytest
from running_corpora import (
    AS_A_FOREGROUND_JOB,
    IDENTITY,
    NUMERICS,
    alive,
    candidate,
    environment,
    processes_mentioning,
    rows,
    start_run,
)

from kernelaudit.cli import main
from kernelaudit.runner.auditor.threads import THREADS_VARIABLE, usable_cores

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc"),
]

HANGS = """
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# importing this problem records what its audit process was given, starts a helper process
# and never returns
seen = Path(__file__).with_name("seen.jsonl")
helper = subprocess.Popen(["sleep", "600"])
record = {{"threads": os.environ.get({variable!r}), "omp": os.environ.get("OMP_NUM_THREADS"),
          "helper": helper.pid}}
with seen.open("a") as out:
    out.write(json.dumps(record) + "\\n")
print("the reference is waiting on a lock", file=sys.stderr, flush=True)
time.sleep(600)
"""


def _hanging_corpus(root: Path) -> Path:
    """A manifest: two jobs whose problem hangs, then one that audits in seconds."""
    (root / "hangs.py").parent.mkdir(parents=True, exist_ok=True)
    (root / "hangs.py").write_text(HANGS.format(variable=THREADS_VARIABLE))
    shutil.copy(IDENTITY, root / "identity.py")
    for name in ("first", "second", "third"):
        candidate(root, name)
    manifest = root / "jobs.jsonl"
    manifest.write_text(
        "".join(
            json.dumps({"problem": problem, "candidate": f"{name}.py::{name}"}) + "\n"
            for problem, name in (
                ("hangs.py", "first"),
                ("hangs.py", "second"),
                ("identity.py", "third"),
            )
        )
    )
    return manifest


def _seen(root: Path) -> list[dict[str, object]]:
    path = root / "seen.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_job_past_its_time_limit_is_a_timeout_and_its_slot_is_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = _hanging_corpus(tmp_path / "corpus")
    db = tmp_path / "results.sqlite"
    argv = ["corpus", str(manifest), "--db", str(db), "--workers", "2", *NUMERICS]

    assert main([*argv, "--job-timeout", "20"]) == 1

    stored = rows(db)
    for name in ("first", "second"):
        assert stored[name]["status"] == "timeout"
        assert stored[name]["verdict"] is None
        assert stored[name]["error"].startswith("no result within --job-timeout 20 s")
        assert stored[name]["error"].endswith("the reference is waiting on a lock")
        assert 20 <= stored[name]["seconds"] < 40
    # both slots were busy with the hanging jobs: the third ran on a slot started afresh
    assert (stored["third"]["status"], stored["third"]["verdict"]) == ("done", "PASS")
    seen = _seen(tmp_path / "corpus")
    assert len(seen) == 2
    share = str(max(1, usable_cores() // 2))
    assert all(s["threads"] == share and s["omp"] == share for s in seen)
    # the slot's whole process group went, the problem's own helper included
    deadline = time.monotonic() + 3
    while any(alive(int(str(s["helper"]))) for s in seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(int(str(s["helper"]))) for s in seen)

    # a log without a terminal shows one line per finished job, with the run's progress
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert len(lines) == 3
    pattern = r"\[(\d)/3, \d+ jobs/hour, (ETA \d+ (s|min)|done)\] (\w+) +(\w+) / \w+\.py::\w+ +\("
    found = [re.match(pattern, line) for line in lines]
    assert all(found), lines
    assert [m.group(1) for m in found if m] == ["1", "2", "3"]
    assert sorted((m.group(4), m.group(5)) for m in found if m) == [
        ("PASS", "identity"),
        ("timeout", "hangs"),
        ("timeout", "hangs"),
    ]
    assert lines[-1].startswith("[3/3, ") and "done]" in lines[-1]

    # a timeout is not audited again unless asked
    assert main(argv) == 1
    assert "3 already in" in " ".join(capsys.readouterr().out.split())


def _wait_for(condition: object, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds} s"
        time.sleep(0.05)


def _flights(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as connection:
        return dict(connection.execute("SELECT key, tries FROM flights").fetchall())


def _one_hanging_job(root: Path) -> Path:
    """A manifest of one job whose problem hangs once imported."""
    root.mkdir()
    (root / "hangs.py").write_text(HANGS.format(variable=THREADS_VARIABLE))
    candidate(root, "only")
    manifest = root / "jobs.jsonl"
    manifest.write_text(json.dumps({"problem": "hangs.py", "candidate": "only.py::only"}))
    return manifest


def test_a_job_that_takes_the_run_down_is_tried_once_more_then_stored_as_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "corpus"
    manifest = _one_hanging_job(root)
    db = tmp_path / "results.sqlite"
    argv = ["corpus", str(manifest), "--db", str(db), *NUMERICS]

    def interrupted_while_auditing(sig: signal.Signals, imports: int) -> None:
        run = start_run(argv)
        try:
            _wait_for(lambda: len(_seen(root)) == imports, "the problem's import")
            if sig == signal.SIGKILL:
                os.killpg(run.pid, sig)
            else:
                run.send_signal(sig)
            run.wait(timeout=30)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
        _wait_for(lambda: not processes_mentioning("--parent", str(run.pid)), "the slot's end")
        # the slot's process group ends with it, the problem's helper included
        _wait_for(lambda: not alive(int(str(_seen(root)[-1]["helper"]))), "the helper's end", 3)

    # Ctrl-C is the user's doing, not the job's: no try is counted
    interrupted_while_auditing(signal.SIGINT, imports=1)
    assert _flights(db) == {}
    # a run killed (as the OOM killer or a lost machine would) while the job is in flight
    interrupted_while_auditing(signal.SIGKILL, imports=2)
    assert list(_flights(db).values()) == [1]
    interrupted_while_auditing(signal.SIGKILL, imports=3)
    assert list(_flights(db).values()) == [2]

    # twice in flight without a result: stored as a crash, not audited a third time
    capsys.readouterr()
    assert main(argv) == 1
    assert len(_seen(root)) == 3
    (row,) = rows(db).values()
    assert (row["status"], row["verdict"], row["attempts"]) == ("crash", None, 1)
    assert row["error"].startswith("the job was in flight 2 times")
    assert row["error"].endswith("the reference is waiting on a lock")
    assert _flights(db) == {}
    out = " ".join(capsys.readouterr().out.split())
    assert "crash hangs / only.py::only" in out
    assert main(argv) == 1
    assert "1 already in" in " ".join(capsys.readouterr().out.split())
    assert len(_seen(root)) == 3


INTERRUPTED_IN_A_READER = """
import os
import signal
import sys
import threading
import time
from pathlib import Path

from kernelaudit.cli import main


def interrupt_a_reader() -> None:
    # once the slot is auditing, Ctrl-C as the kernel may deliver it: to a thread that reads
    # a slot, not to the main thread
    seen = Path(sys.argv[1])
    while not (seen.exists() and seen.read_text()):
        time.sleep(0.05)
    readers = [t for t in threading.enumerate() if t.name == "kernelaudit-slot-reader"]
    if len(readers) != 1 or readers[0].ident is None:
        print("not one slot reader:", threading.enumerate(), flush=True)
        os._exit(2)
    signal.pthread_kill(readers[0].ident, signal.SIGINT)


threading.Thread(target=interrupt_a_reader, daemon=True).start()
print("exit code", main(sys.argv[2:]), flush=True)
"""


def test_an_interrupt_a_slots_reader_takes_still_ends_the_run(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    manifest = _one_hanging_job(root)
    argv = ["corpus", str(manifest), "--db", str(tmp_path / "results.sqlite"), *NUMERICS]
    run = subprocess.Popen(
        [
            sys.executable,
            "-c",
            AS_A_FOREGROUND_JOB,
            "-c",
            INTERRUPTED_IN_A_READER,
            str(root / "seen.jsonl"),
            *argv,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env=environment(),
    )
    try:
        out, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        for seen in _seen(root):  # the slot's group ends with the run, its helper included
            _wait_for(lambda: not alive(int(str(seen["helper"]))), "the helper's end", 10)  # noqa: B023
    # before, the run waited for its slots with no end and never saw the interrupt
    assert "exit code 130" in out, out


def test_a_job_timeout_must_be_a_positive_number_of_seconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for value in ("0", "-3", "soon", "inf"):
        with pytest.raises(SystemExit) as exited:
            main(["corpus", str(tmp_path), "--job-timeout", value])
        assert exited.value.code == 2
        assert f"'{value}' is not a number of seconds above 0" in capsys.readouterr().err
