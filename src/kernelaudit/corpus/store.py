"""The corpus database: one SQLite row per finished job, committed the moment its result
arrives, so a killed run loses only the audits that were still running; and one row per job in
flight, so that a job that brings down its slot or the run is retried once, not forever.

Every row is sealed: it carries an HMAC of its contents under the key the auditor seals its
reports with (`report.seal`), which no candidate's sandbox holds. Every read checks the seals. A
result whose seal is missing, does not match, or was made with another key is not trusted:
`Store.untrusted` lists it, and its job counts as not audited, so the next run over it audits it
again. A job in flight whose seal does not hold is taken as not in flight: no try is counted
against it, and no file it names is quoted. What the database may hold, and how older versions
are brought to this one, is `corpus.schema`'s."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kernelaudit.corpus.jobs import Job
from kernelaudit.corpus.schema import FLIGHT_FIELDS, RESULT_FIELDS, STATUSES, open_database
from kernelaudit.errors import UsageError
from kernelaudit.findings import AuditReport
from kernelaudit.report.seal import check, key_path, seal

MAX_TRIES = 2
"""How many times a job is handed to a slot (or a Ray task) without a result before it is
stored as a crash: once, and once more in case the first slot died of something else."""

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
    """The results of a corpus, in one SQLite file (`schema.open_database`: created, checked
    and brought to this schema version when opened)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = open_database(path)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def depart(self, flight: Flight) -> int:
        """Record, sealed, that a job was handed out; returns how many times it has been handed
        out without a result, this time included (a try recorded under a seal that does not
        hold is not counted)."""
        now = datetime.now(timezone.utc).isoformat(timespec="microseconds")
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            earlier = self._flight(flight.key)
            if earlier is None:
                self._write_flight(replace(flight, tries=1, started_at=now, last_end=None))
                return 1
            tries = earlier.tries + 1
            # how the earlier try ended stays, for the message of the crash it may become
            self._write_flight(
                replace(flight, tries=tries, started_at=now, last_end=earlier.last_end)
            )
        return tries

    def ended(self, key: str, how: str) -> None:
        """Record how a try of a job in flight ended without a result (its slot died), for
        the message of the crash it may become."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            earlier = self._flight(key)
            if earlier is not None:
                self._write_flight(replace(earlier, last_end=how))

    def abandon(self, keys: Collection[str]) -> None:
        """Forget that these jobs are in flight (a run stopped on purpose, or asked to audit
        them afresh): no try is counted against them."""
        with self._db:
            self._db.executemany("DELETE FROM flights WHERE key = ?", [(k,) for k in keys])

    def flights(self) -> dict[str, Flight]:
        """The jobs handed out and never answered (those of a run that died) whose seal holds."""
        return {flight.key: flight for flight in self._flights() if flight is not None}

    def _flight(self, key: str) -> Flight | None:
        return next(iter(self._flights(key)), None)

    def _flights(self, key: str | None = None) -> Iterator[Flight | None]:
        """Each job in flight (only `key`, when given), None for one whose seal does not hold."""
        columns = f"{', '.join(FLIGHT_FIELDS)}, seal"
        rows = (
            self._db.execute(f"SELECT {columns} FROM flights")
            if key is None
            else self._db.execute(f"SELECT {columns} FROM flights WHERE key = ?", (key,))
        )
        for *values, sealed in rows:
            row = dict(zip(FLIGHT_FIELDS, values, strict=True))
            yield Flight(**row) if _seal_state(_flight_content(row), sealed) == "intact" else None

    def _write_flight(self, flight: Flight) -> None:
        row = {name: getattr(flight, name) for name in FLIGHT_FIELDS}
        row["seal"] = json.dumps(seal(_flight_content(row)))
        names = ", ".join(row)
        values = ", ".join(f":{name}" for name in row)
        self._db.execute(f"INSERT OR REPLACE INTO flights ({names}) VALUES ({values})", row)

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
        names = ", ".join((*RESULT_FIELDS, "seal"))
        values = ", ".join(f":{name}" for name in (*RESULT_FIELDS, "seal"))
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
            f"SELECT {', '.join(RESULT_FIELDS)}, seal FROM results ORDER BY finished_at"
        )
        chosen = None if keys is None else set(keys)
        for *values, sealed in rows:
            if chosen is None or values[0] in chosen:
                row = dict(zip(RESULT_FIELDS, values, strict=True))
                yield row, _seal_state(row, sealed)


def _flight_content(row: dict[str, Any]) -> dict[str, Any]:
    """What a flight's seal covers: its row, marked as a flight (a result's seal cannot pass
    for one)."""
    return {"table": "flights", **row}


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
