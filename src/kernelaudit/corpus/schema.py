"""The corpus database's tables: what kernelaudit creates, what each older schema version held,
and how a database is opened, checked and brought to this version.

The store refuses to open a database that holds a table, index, view or trigger it did not
create, or one of its tables changed: a trigger could rewrite verdicts as they are stored.
Versions 1 and 2 (results without seals) and 3 (jobs in flight without seals) are brought to
this one when opened: their results are kept as they are, readable but unsealed, so their jobs
are audited again; their jobs in flight are dropped (nothing vouches for them), which at worst
tries such a job once more than otherwise."""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from pathlib import Path

from kernelaudit.errors import UsageError

SCHEMA_VERSION = 4

STATUSES = ("done", "error", "timeout", "crash", "unrunnable", "tampered")
"""How a job ended; see `store.StoredResult.status`."""

RESULTS = f"""
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
"""The results table. SQLite keeps this text, which an opened database's must match: changing
it makes a new schema version."""

FLIGHTS = """
CREATE TABLE flights (
    key        TEXT PRIMARY KEY,
    device     TEXT NOT NULL,
    log        TEXT,
    log_start  INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    tries      INTEGER NOT NULL,
    last_end   TEXT,
    seal       TEXT
)
"""
"""The jobs in flight, each row sealed like a result (`store.Store.depart`)."""

RESULT_FIELDS = (
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

FLIGHT_FIELDS = ("key", "device", "log", "log_start", "started_at", "tries", "last_end")
"""The columns of a flight row that its seal covers: all but the seal."""

_FLIGHTS_V2 = FLIGHTS.replace(
    "    last_end   TEXT,\n    seal       TEXT\n", "    last_end   TEXT\n"
)
"""The flights table of schema versions 2 and 3: rows without a seal."""

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


def open_database(path: Path) -> sqlite3.Connection:
    """`path` opened as a corpus database of this schema version (created when it holds
    nothing; brought to this version from versions 1 to 3), in WAL mode, so that a reader
    such as a second `--summary-only` never blocks the run that writes."""
    try:
        db = sqlite3.connect(path)
        version = db.execute("PRAGMA user_version").fetchone()[0]
        found = _objects(db)
    except sqlite3.DatabaseError as error:
        raise UsageError(
            f"{path} is not a corpus database ({error}); pass another --db path"
        ) from None
    tables = sorted(name for kind, name in found if kind == "table")
    if found and ("results" not in tables or not 1 <= version <= SCHEMA_VERSION):
        db.close()
        newer = version > SCHEMA_VERSION and "results" in tables
        raise UsageError(
            f"{path} was written by a newer kernelaudit (schema version {version}); "
            "upgrade kernelaudit or pass another --db path"
            if newer
            else f"{path} is not a kernelaudit corpus database (schema version {version}, "
            f"tables {tables}); pass another --db path"
        )
    if found:
        ours = _schema(version) if version >= 3 else dict.fromkeys(_UNSEALED_OBJECTS)
        _refuse_strangers(db, path, found, ours)
    db.execute("PRAGMA journal_mode=WAL")
    if not found:
        db.executescript(
            f"BEGIN; {RESULTS}; {FLIGHTS}; PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
        )
    elif version < 3:
        _unsealed_to_sealed(db)
    elif version == 3:
        db.executescript(
            f"BEGIN; DROP TABLE flights; {FLIGHTS}; PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
        )
    return db


def _refuse_strangers(
    db: sqlite3.Connection,
    path: Path,
    found: dict[tuple[str, str], str | None],
    ours: dict[tuple[str, str], str | None],
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
    db.close()
    if altered:
        raise UsageError(
            f"{path}: its table(s) {', '.join(altered)} are not as kernelaudit creates "
            "them (changed or dropped after it made them), so kernelaudit does not open it; "
            f"delete {path} (or pass another --db) and run again: every job is audited "
            "afresh"
        )
    named = ", ".join(f"{kind} {name!r}" for kind, name in strangers)
    drops = "; ".join(f'DROP {kind.upper()} "{name}"' for kind, name in strangers)
    raise UsageError(
        f"{path} holds {named}, which kernelaudit did not create: a trigger or a view "
        "can rewrite or hide verdicts as they are stored or read, so kernelaudit does not "
        f"open it. Remove what it names (sqlite3 {path} '{drops}'; any result changed "
        f"through it fails its seal and is audited again) or delete {path} to start "
        "afresh"
    )


def _unsealed_to_sealed(db: sqlite3.Connection) -> None:
    """Bring a database of schema version 1 or 2 to this one: the results table copied into
    one with the new columns and statuses (SQLite alters no CHECK in place), its rows left
    without a seal; the keys kept for schema 1 results and the jobs in flight dropped."""
    db.executescript(
        f"""
        BEGIN;
        ALTER TABLE results RENAME TO results_unsealed;
        {RESULTS};
        INSERT INTO results ({_UNSEALED_FIELDS})
            SELECT {_UNSEALED_FIELDS} FROM results_unsealed;
        DROP TABLE results_unsealed;
        DROP TABLE IF EXISTS v1_keys;
        DROP TABLE IF EXISTS flights;
        {FLIGHTS};
        PRAGMA user_version = {SCHEMA_VERSION};
        COMMIT;
        """
    )


def _objects(db: sqlite3.Connection) -> dict[tuple[str, str], str | None]:
    """The database's tables, indexes, views and triggers, (kind, name): SQL; the statistics
    SQLite keeps for its query planner (ANALYZE) left out."""
    rows = db.execute("SELECT type, name, sql FROM sqlite_master")
    return {(kind, name): sql for kind, name, sql in rows if not name.startswith("sqlite_stat")}


@functools.cache
def _schema(version: int) -> dict[tuple[str, str], str | None]:
    """The objects the store makes at schema `version` (3 or this one), with their SQL as
    SQLite keeps it."""
    flights = FLIGHTS if version == SCHEMA_VERSION else _FLIGHTS_V2
    with contextlib.closing(sqlite3.connect(":memory:")) as db:
        db.executescript(f"{RESULTS}; {flights};")
        return _objects(db)
