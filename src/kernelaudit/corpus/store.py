"""The corpus database: one SQLite row per finished job, committed the moment its result
arrives, so a killed run loses only the audits that were still running; and one row per job in
flight, so that a job that brings down its slot or the run is retried once, not forever."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kernelaudit.corpus.jobs import Job
from kernelaudit.errors import UsageError
from kernelaudit.findings import AuditReport

SCHEMA_VERSION = 2

STATUSES = ("done", "error", "timeout", "crash", "unrunnable")
"""How a job ended; see `StoredResult.status`."""

MAX_TRIES = 2
"""How many times a job is handed to a slot (or a Ray task) without a result before it is
stored as a crash: once, and once more in case the first slot died of something else."""

_RESULTS = """
CREATE TABLE results (
    key            TEXT PRIMARY KEY,
    problem        TEXT NOT NULL,
    candidate      TEXT NOT NULL,
    profile        TEXT NOT NULL,
    checks         TEXT NOT NULL,
    status         TEXT NOT NULL
                   CHECK (status IN ('done', 'error', 'timeout', 'crash', 'unrunnable')),
    verdict        TEXT CHECK (verdict IN ('PASS', 'FAIL')),
    failing_checks TEXT NOT NULL DEFAULT '[]',
    report         TEXT,
    error          TEXT,
    device         TEXT,
    seconds        REAL,
    finished_at    TEXT NOT NULL,
    attempts       INTEGER NOT NULL DEFAULT 1
)
"""

_FLIGHTS = """
CREATE TABLE IF NOT EXISTS flights (
    key        TEXT PRIMARY KEY,
    device     TEXT NOT NULL,
    log        TEXT,
    log_start  INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    tries      INTEGER NOT NULL,
    last_end   TEXT
)
"""

_V1_KEYS = "CREATE TABLE IF NOT EXISTS v1_keys (key TEXT PRIMARY KEY)"
"""The keys of results carried over from a schema 1 database, which held absolute paths: a
run that finds one of its jobs under such a key moves the result to the job's key."""

_COLUMNS = (
    "key, problem, candidate, profile, checks, status, verdict, failing_checks, error, device, "
    "seconds, finished_at, attempts"
)


@dataclass(frozen=True)
class JobResult:
    """What auditing one job gave: a report (as its JSON document) or why there is none.

    device: where it ran ("cpu", "cuda:3" for the machine's fourth GPU, a Ray node's device).
    seconds: wall time of the job in its slot, reading the problem included; None where no one
        saw it end (a job found in flight after the run that audited it died).
    status: one of `STATUSES`; "" to take it from the report ("done" with one, else "error").
    """

    key: str
    job: Job
    report: dict[str, Any] | None
    error: str | None
    device: str
    seconds: float | None
    status: str = ""

    def __post_init__(self) -> None:
        if not self.status:
            object.__setattr__(self, "status", "error" if self.report is None else "done")
        if self.status not in STATUSES or (self.status == "done") != (self.report is not None):
            raise ValueError(f"a {self.status!r} result cannot hold report={self.report!r}")


@dataclass(frozen=True)
class StoredResult:
    """One row of the database, without its report (see `Store.report`)."""

    key: str
    problem: str
    candidate: str
    profile: str
    checks: str
    status: str
    """'done' (audited: the verdict says how it went), 'error' (the audit could not run),
    'timeout' (past --job-timeout), 'crash' (its audit process died each time it was tried)
    or 'unrunnable' (this machine cannot run the problem: `error` says why)."""
    verdict: str | None
    failing_checks: tuple[str, ...]
    """The checks with a finding of severity "fail" in the report."""
    error: str | None
    device: str | None
    seconds: float | None
    finished_at: str
    attempts: int


@dataclass(frozen=True)
class Flight:
    """A job handed to a slot (or a Ray task) and not yet answered.

    log: the slot's log file (None for a Ray task); log_start: its size when the job was
    handed over, so that what the slot wrote while auditing the job can be quoted.
    tries: how many times the job has been handed out without a result, this time included.
    last_end: how the last try ended, where the run saw it end (its slot dying).
    """

    key: str
    device: str
    log: str | None
    log_start: int
    tries: int = 1
    started_at: str = ""
    last_end: str | None = None

    def log_tail(self, limit: int = 2000) -> str:
        """The last `limit` bytes the slot wrote to its log since it was handed the job."""
        if self.log is None:
            return ""
        try:
            with open(self.log, "rb") as log:
                end = log.seek(0, 2)
                log.seek(max(self.log_start, end - limit))
                return log.read().decode(errors="replace").strip()
        except OSError:
            return ""


class Store:
    """The results of a corpus, in one SQLite file (WAL mode: a reader, such as a second
    `--summary-only`, never blocks the run that writes). A database of schema version 1 is
    brought to version 2 when opened, its results kept."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._db = sqlite3.connect(path)
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master")}
        except sqlite3.DatabaseError as error:
            raise UsageError(
                f"{path} is not a corpus database ({error}); pass another --db path"
            ) from None
        if (tables and "results" not in tables) or version not in (0, 1, SCHEMA_VERSION):
            self._db.close()
            newer = version > SCHEMA_VERSION and "results" in tables
            raise UsageError(
                f"{path} was written by a newer kernelaudit (schema version {version}); "
                "upgrade kernelaudit or pass another --db path"
                if newer
                else f"{path} is not a kernelaudit corpus database (schema version {version}, "
                f"tables {sorted(tables)}); pass another --db path"
            )
        self._db.execute("PRAGMA journal_mode=WAL")
        if version == 1:
            self._from_v1()
        elif "results" not in tables:
            self._db.executescript(
                f"BEGIN; {_RESULTS}; PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            )
        self._db.executescript(f"{_FLIGHTS}; {_V1_KEYS};")

    def _from_v1(self) -> None:
        """Widen the status column to the new statuses (SQLite alters no CHECK in place: the
        table is copied) and remember which keys are of the old kind."""
        self._db.executescript(
            f"""
            BEGIN;
            ALTER TABLE results RENAME TO results_v1;
            {_RESULTS};
            INSERT INTO results SELECT * FROM results_v1;
            DROP TABLE results_v1;
            {_V1_KEYS};
            INSERT INTO v1_keys SELECT key FROM results;
            PRAGMA user_version = {SCHEMA_VERSION};
            COMMIT;
            """
        )

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def statuses(self) -> dict[str, str]:
        """Every stored job's key and status."""
        return dict(self._db.execute("SELECT key, status FROM results").fetchall())

    def holds_v1_keys(self) -> bool:
        """Whether some result is still stored under a schema 1 key."""
        return self._db.execute("SELECT 1 FROM v1_keys LIMIT 1").fetchone() is not None

    def adopt_v1(self, keys: dict[str, str]) -> int:
        """Move results stored under a schema 1 key to the job's key ({v1 key: key}), where
        the job has no result of its own yet; returns how many moved."""
        legacy = {r[0] for r in self._db.execute("SELECT key FROM v1_keys")}
        moves = [(new, old) for old, new in keys.items() if old in legacy and old != new]
        with self._db:
            moved = 0
            for new, old in moves:
                moved += self._db.execute(
                    "UPDATE OR IGNORE results SET key = ? WHERE key = ?", (new, old)
                ).rowcount
                self._db.execute("DELETE FROM v1_keys WHERE key = ?", (old,))
        return moved

    def depart(self, flight: Flight) -> int:
        """Record that a job was handed out; returns how many times it has been handed out
        without a result, this time included."""
        now = datetime.now(timezone.utc).isoformat(timespec="microseconds")
        with self._db:
            self._db.execute(
                "INSERT INTO flights (key, device, log, log_start, started_at, tries) "
                "VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT(key) DO UPDATE SET "
                "device = excluded.device, log = excluded.log, log_start = excluded.log_start, "
                "started_at = excluded.started_at, tries = flights.tries + 1",
                (flight.key, flight.device, flight.log, flight.log_start, now),
            )
        row = self._db.execute("SELECT tries FROM flights WHERE key = ?", (flight.key,))
        tries: int = row.fetchone()[0]
        return tries

    def ended(self, key: str, how: str) -> None:
        """Record how a try of a job in flight ended without a result (its slot died), for
        the message of the crash it may become."""
        with self._db:
            self._db.execute("UPDATE flights SET last_end = ? WHERE key = ?", (how, key))

    def abandon(self, keys: Collection[str]) -> None:
        """Forget that these jobs are in flight (a run stopped on purpose, or asked to audit
        them afresh): no try is counted against them."""
        with self._db:
            self._db.executemany("DELETE FROM flights WHERE key = ?", [(k,) for k in keys])

    def flights(self) -> dict[str, Flight]:
        """The jobs handed out and never answered: those of a run that died."""
        rows = self._db.execute(
            "SELECT key, device, log, log_start, tries, started_at, last_end FROM flights"
        ).fetchall()
        return {row[0]: Flight(*row) for row in rows}

    def record(self, result: JobResult, profile: str, checks: list[str] | None) -> None:
        """Store one result in its own transaction, the job no longer in flight. A job stored
        before (rerun) is replaced and its attempts counted up."""
        report = result.report
        failing = (
            sorted({f["check"] for f in report["findings"] if f["severity"] == "fail"})
            if report is not None
            else []
        )
        row = {
            "key": result.key,
            "problem": result.job.problem,
            "candidate": result.job.candidate,
            "profile": profile,
            "checks": "all" if checks is None else ",".join(sorted(set(checks))),
            "status": result.status,
            "verdict": None if report is None else report["verdict"],
            "failing_checks": json.dumps(failing),
            "report": None if report is None else json.dumps(report, allow_nan=False),
            "error": result.error,
            "device": result.device,
            "seconds": None if result.seconds is None else round(result.seconds, 3),
            "finished_at": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
        }
        names = ", ".join(row)
        updates = ", ".join(f"{n} = excluded.{n}" for n in row if n != "key")
        with self._db:
            self._db.execute(
                f"INSERT INTO results ({names}) VALUES ({', '.join(':' + n for n in row)}) "
                f"ON CONFLICT(key) DO UPDATE SET {updates}, attempts = results.attempts + 1",
                row,
            )
            self._db.execute("DELETE FROM flights WHERE key = ?", (result.key,))

    def results(self, keys: Collection[str] | None = None) -> list[StoredResult]:
        """The stored results (of `keys` only, when given), in the order they finished."""
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM results ORDER BY finished_at")
        chosen = None if keys is None else set(keys)
        return [_stored(row) for row in rows if chosen is None or row[0] in chosen]

    def report(self, key: str) -> AuditReport:
        row = self._db.execute("SELECT report FROM results WHERE key = ?", (key,)).fetchone()
        if row is None or row[0] is None:
            raise UsageError(f"{self.path} holds no report for job {key}")
        return AuditReport.from_json(json.loads(row[0]))


def _stored(row: tuple[Any, ...]) -> StoredResult:
    values = dict(zip((c.strip() for c in _COLUMNS.split(",")), row, strict=True))
    values["failing_checks"] = tuple(json.loads(values["failing_checks"]))
    return StoredResult(**values)
