"""What the corpus tests share: tiny corpora, the rows of a database, processes by command line."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import kernelaudit

IDENTITY = Path(__file__).parents[1] / "checks" / "fixtures" / "identity.py"
NUMERICS = ["--profile", "quick", "--checks", "execution,numerics", "--device", "cpu"]
"""The cheapest audit that runs the candidate and judges its numbers."""

V1_SCHEMA = """
CREATE TABLE results (
    key            TEXT PRIMARY KEY,
    problem        TEXT NOT NULL,
    candidate      TEXT NOT NULL,
    profile        TEXT NOT NULL,
    checks         TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('done', 'error')),
    verdict        TEXT CHECK (verdict IN ('PASS', 'FAIL')),
    failing_checks TEXT NOT NULL DEFAULT '[]',
    report         TEXT,
    error          TEXT,
    device         TEXT,
    seconds        REAL,
    finished_at    TEXT NOT NULL,
    attempts       INTEGER NOT NULL DEFAULT 1
);
PRAGMA user_version = 1;
"""
"""The results table as databases of schema version 1 hold it."""

V2_SCHEMA = (
    V1_SCHEMA.replace(
        "CHECK (status IN ('done', 'error'))",
        "CHECK (status IN ('done', 'error', 'timeout', 'crash', 'unrunnable'))",
    ).replace("PRAGMA user_version = 1;", "PRAGMA user_version = 2;")
    + """
CREATE TABLE flights (
    key        TEXT PRIMARY KEY,
    device     TEXT NOT NULL,
    log        TEXT,
    log_start  INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    tries      INTEGER NOT NULL,
    last_end   TEXT
);
CREATE TABLE v1_keys (key TEXT PRIMARY KEY);
"""
)
"""The tables of databases of schema version 2: results without a seal."""


def identity_at(rows: str, cols: str) -> str:
    """The identity problem's source with its one workload at `rows` x `cols`."""
    workload = f'{{"rows": {rows}, "cols": {cols}}}'
    source = IDENTITY.read_text()
    assert '{"rows": 8, "cols": 16}' in source
    return source.replace('{"rows": 8, "cols": 16}', workload)


def candidate(folder: Path, name: str) -> Path:
    """A correct candidate for the identity problem: `folder/name.py::name`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(f"def {name}(x):\n    return x.clone()\n")
    return path


def rows(db: Path) -> dict[str, dict[str, Any]]:
    """The stored results by candidate function name."""
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.row_factory = sqlite3.Row
        found = connection.execute("SELECT * FROM results").fetchall()
    return {row["candidate"].rpartition("::")[2]: dict(row) for row in found}


def processes_mentioning(*words: str) -> list[str]:
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


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def environment() -> dict[str, str]:
    source = str(Path(kernelaudit.__file__).parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])}


AS_A_FOREGROUND_JOB = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)
"""Run the command line that follows with Ctrl-C's signal at its default, as a terminal starts
its foreground job, whatever the suite was started with: a suite started in the background (`&`
in a script, `nohup`) hands its processes SIGINT ignored, and a run that ignores it cannot be
interrupted. The command keeps the process (exec)."""


def start_run(argv: list[str]) -> subprocess.Popen[bytes]:
    """`kernelaudit *argv` in a process group of its own, as a user's shell would start it."""
    return subprocess.Popen(
        [sys.executable, "-c", AS_A_FOREGROUND_JOB, "-m", "kernelaudit.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=environment(),
    )
