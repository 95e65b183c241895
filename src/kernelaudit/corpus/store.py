"""The corpus database: one SQLite row per finished job, committed the moment its result
arrives, so a killed run loses only the audits that were still running; and one row per job in
flight, so that a job that brings down its slot or the run is retried once, not forever.

Every result row is sealed: it carries an HMAC of its contents under the key the auditor seals
its reports with (`report.seal`), which no candidate's sandbox holds. Every read checks the
seals. A row whose seal is missing, does not match, or was made with another key is not
trusted: `Store.untrusted` lists it, and its job counts as not audited, so the next run over it
audits it again. The store refuses to open a database that holds a table, index, view or trigger
it did not create: a trigger could rewrite verdicts as they are stored.

A database of an older schema (1 or 2, from before rows were sealed) is brought to this one
when opened. Its rows are kept as they are, readable but unsealed: nothing vouches for them, so
none is sealed after the fact, and their jobs are audited again by the next run over them."""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kernelaudit.corpus.jobs import Job
from kernelaudit.errors import UsageError
from kernelaudit.findings import AuditReport
from kernelaudit.report.seal import check, key_path, seal

SCHEMA_VERSION = 3

STATUSES = ("done", "error", "timeout", "crash", "unrunnable", "tampered")
"""How a job ended; see `StoredResult.status`."""

MAX_TRIES = 2
"""How many times a job is handed to a slot (or a Ray task) without a result before it is
stored as a crash: once, and once more in case the first slot died of something else."""

_RESULTS = f"""
CREATE TABLE results (
    key              TEXT PRIMARY KEY,
    problem          TEXT NOT NULL,
    candidate        TEXT NOT NULL,
    problem_sha256   TEXT,
    candidate_sha256 TEXT,
    profile          TEXT NOT NULL,
    checks           TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ({", ".join(map(repr, STATUSES))})),
    verdict          TEXT CHECK (verdict IN ('PASS', 'FAIL')),
    failing_checks   TEXT NOT NULL DEFAULT '[]',
    report           TEXT,
    error            TEXT,
    device           TEXT,
    seconds          REAL,
    finished_at      TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 1,
    seal             TEXT
)
"""
"""The results table. SQLite keeps this text, which an opened database's must match (`_schema`):
changing it makes a new schema version."""

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

_FIELDS = (
    "key",
    "problem",
    "candidate",
    "problem_sha256",
    "candidate_sha256",
    "profile",
    "checks",
    "status",
    "verdict",
    "failing_checks",
    "report",
    "error",
    "device",
    "seconds",
    "finished_at",
    "attempts",
)
"""The columns of a result row that its seal covers: all but the seal."""

_UNSEALED_FIELDS = (
    "key, problem, candidate, profile, checks, status, verdict, failing_checks, report, error, "
    "device, seconds, finished_at, attempts"
)
"""The columns of the results table of schema versions 1 and 2."""

_UNSEALED_OBJECTS = {
    (kind, name)
    for table in ("results", "flights", "v1_keys")
    for kind, name in (("table", table), ("index", f"sqlite_autoindex_{table}_1"))
}
"""What the store made in a database of schema version 1 or 2."""

_UNTRUSTED_WHY = {
    "changed": "tampered: changed after kernelaudit stored it (its seal does not match)",
    "unsealed": "unsealed: stored without a seal (by a kernelaudit from before results were "
    "sealed, or by something else)",
    "foreign": "sealed with another key than this user's {key}: written on another machine or "
    "by another user, so it cannot be checked here (copy that key file along with the database "
    "to keep its results)",
}


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
    problem_sha256: str | None
    candidate_sha256: str | None
    """The sha256 of the problem's and the candidate's files as the run read them before any
    job started (see `jobs.Job`); None where not recorded."""
    profile: str
    checks: str
    status: str
    """'done' (audited: the verdict says how it went), 'error' (the audit could not run),
    'timeout' (past --job-timeout), 'crash' (its audit process died each time it was tried),
    'unrunnable' (this machine cannot run the problem: `error` says why) or 'tampered' (the
    problem's or the candidate's file changed while the run held it: `error` names it)."""
    verdict: str | None
    failing_checks: tuple[str, ...]
    """The checks with a finding of severity "fail" in the report."""
    error: str | None
    device: str | None
    seconds: float | None
    finished_at: str
    attempts: int


@dataclass(frozen=True)
class UntrustedRow:
    """A stored result whose seal does not hold: its job counts as not audited. Its fields are
    as the database holds them, good for naming the job and nothing else."""

    key: str
    problem: str
    candidate: str
    why: str
    """'changed' (changed after kernelaudit stored it), 'unsealed' (stored without a seal) or
    'foreign' (sealed with another key: another machine or user)."""

    @property
    def reason(self) -> str:
        """Why the row is not trusted, in words."""
        return _UNTRUSTED_WHY[self.why].format(key=key_path())


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
    `--summary-only`, never blocks the run that writes). A database of schema version 1 or 2
    is brought to version 3 when opened, its rows kept unsealed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._db = sqlite3.connect(path)
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            objects = _objects(self._db)
        except sqlite3.DatabaseError as error:
            raise UsageError(
                f"{path} is not a corpus database ({error}); pass another --db path"
            ) from None
        tables = sorted(name for kind, name in objects if kind == "table")
        if objects and ("results" not in tables or version not in (1, 2, SCHEMA_VERSION)):
            self._db.close()
            newer = version > SCHEMA_VERSION and "results" in tables
            raise UsageError(
                f"{path} was written by a newer kernelaudit (schema version {version}); "
                "upgrade kernelaudit or pass another --db path"
                if newer
                else f"{path} is not a kernelaudit corpus database (schema version {version}, "
                f"tables {tables}); pass another --db path"
            )
        if version == SCHEMA_VERSION:
            self._refuse_strangers(objects, _schema())
        elif objects:
            self._refuse_strangers(objects, dict.fromkeys(_UNSEALED_OBJECTS))
        self._db.execute("PRAGMA journal_mode=WAL")
        if not objects:
            self._db.executescript(
                f"BEGIN; {_RESULTS}; {_FLIGHTS}; PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            )
        elif version < SCHEMA_VERSION:
            self._unsealed_to_sealed()

    def _refuse_strangers(
        self, found: dict[tuple[str, str], str | None], ours: dict[tuple[str, str], str | None]
    ) -> None:
        """Refuse a database holding an object the store does not make, or one of its tables
        made otherwise (`ours` maps each object to its SQL; None: any)."""
        strangers = [(kind, name) for kind, name in found if (kind, name) not in ours]
        altered = [
            name
            for (kind, name), sql in ours.items()
            if sql is not None and found.get((kind, name)) != sql
        ]
        if not strangers and not altered:
            return
        self._db.close()
        if altered:
            raise UsageError(
                f"{self.path}: its table(s) {', '.join(altered)} are not as kernelaudit creates "
                "them (changed or dropped after it made them), so kernelaudit does not open it; "
                f"delete {self.path} (or pass another --db) and run again: every job is audited "
                "afresh"
            )
        named = ", ".join(f"{kind} {name!r}" for kind, name in strangers)
        drops = "; ".join(f'DROP {kind.upper()} "{name}"' for kind, name in strangers)
        raise UsageError(
            f"{self.path} holds {named}, which kernelaudit did not create: a trigger or a view "
            "can rewrite or hide verdicts as they are stored or read, so kernelaudit does not "
            f"open it. Remove what it names (sqlite3 {self.path} '{drops}'; any result changed "
            f"through it fails its seal and is audited again) or delete {self.path} to start "
            "afresh"
        )

    def _unsealed_to_sealed(self) -> None:
        """Bring a database of schema version 1 or 2 to this one: the results table copied
        into one with the new columns and statuses (SQLite alters no CHECK in place), its rows
        left without a seal; the keys kept for schema 1 results dropped."""
        self._db.executescript(
            f"""
            BEGIN;
            ALTER TABLE results RENAME TO results_unsealed;
            {_RESULTS};
            INSERT INTO results ({_UNSEALED_FIELDS})
                SELECT {_UNSEALED_FIELDS} FROM results_unsealed;
            DROP TABLE results_unsealed;
            DROP TABLE IF EXISTS v1_keys;
            {_FLIGHTS};
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
        """Store one result, sealed, in its own transaction, the job no longer in flight. A job
        stored before (rerun) is replaced and its attempts counted up."""
        report = result.report
        failing = (
            sorted({f["check"] for f in report["findings"] if f["severity"] == "fail"})
            if report is not None
            else []
        )
        row: dict[str, Any] = {
            "key": result.key,
            "problem": result.job.problem,
            "candidate": result.job.candidate,
            "problem_sha256": result.job.problem_sha256,
            "candidate_sha256": result.job.candidate_sha256,
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
        names = ", ".join((*_FIELDS, "seal"))
        values = ", ".join(f":{name}" for name in (*_FIELDS, "seal"))
        with self._db:
            # the attempts are sealed with the rest: counted and written in one transaction
            self._db.execute("BEGIN IMMEDIATE")
            row["attempts"] = self._db.execute(
                "SELECT CAST(COALESCE(MAX(attempts), 0) AS INTEGER) + 1 FROM results WHERE key = ?",
                (result.key,),
            ).fetchone()[0]
            row["seal"] = json.dumps(seal(row))
            self._db.execute(f"INSERT OR REPLACE INTO results ({names}) VALUES ({values})", row)
            self._db.execute("DELETE FROM flights WHERE key = ?", (result.key,))

    def results(self, keys: Collection[str] | None = None) -> list[StoredResult]:
        """The stored results whose seal holds (of `keys` only, when given), in the order they
        finished."""
        return [_stored(row) for row, state in self._rows(keys) if state == "intact"]

    def untrusted(self, keys: Collection[str] | None = None) -> list[UntrustedRow]:
        """The stored results whose seal does not hold (of `keys` only, when given): their jobs
        count as not audited."""
        return [
            UntrustedRow(str(row["key"]), str(row["problem"]), str(row["candidate"]), state)
            for row, state in self._rows(keys)
            if state != "intact"
        ]

    def report(self, key: str) -> AuditReport:
        for row, state in self._rows([key]):
            if state != "intact":
                why = UntrustedRow(key, "", "", state).reason
                raise UsageError(f"{self.path}: the result of job {key} is {why}; audit it again")
            if row["report"] is not None:
                return AuditReport.from_json(json.loads(row["report"]))
        raise UsageError(f"{self.path} holds no report for job {key}")

    def _rows(self, keys: Collection[str] | None) -> Iterator[tuple[dict[str, Any], str]]:
        """Each stored row (of `keys` only, when given), with what its seal says: "intact",
        "changed", "unsealed" or "foreign" (`report.seal.check`)."""
        rows = self._db.execute(
            f"SELECT {', '.join(_FIELDS)}, seal FROM results ORDER BY finished_at"
        )
        chosen = None if keys is None else set(keys)
        for *values, sealed in rows:
            if chosen is None or values[0] in chosen:
                row = dict(zip(_FIELDS, values, strict=True))
                yield row, _seal_state(row, sealed)


def _seal_state(row: dict[str, Any], sealed: object) -> str:
    if sealed is None:
        return "unsealed"
    try:
        return check(row, json.loads(str(sealed)))
    except (ValueError, TypeError):
        # not JSON, or a value no row of ours holds (a NaN, bytes)
        return "changed"


def _stored(row: dict[str, Any]) -> StoredResult:
    fields = {name: value for name, value in row.items() if name != "report"}
    fields["failing_checks"] = tuple(json.loads(row["failing_checks"]))
    return StoredResult(**fields)


def _objects(db: sqlite3.Connection) -> dict[tuple[str, str], str | None]:
    """The database's tables, indexes, views and triggers, (kind, name): SQL; the statistics
    SQLite keeps for its query planner (ANALYZE) left out."""
    rows = db.execute("SELECT type, name, sql FROM sqlite_master")
    return {(kind, name): sql for kind, name, sql in rows if not name.startswith("sqlite_stat")}


@functools.cache
def _schema() -> dict[tuple[str, str], str | None]:
    """The objects the store makes, with their SQL as SQLite keeps it."""
    with contextlib.closing(sqlite3.connect(":memory:")) as db:
        db.executescript(f"{_RESULTS}; {_FLIGHTS};")
        return _objects(db)
