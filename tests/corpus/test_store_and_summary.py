import contextlib
import sqlite3
from pathlib import Path

import pytest
from rich.console import Console
from running_corpora import V1_SCHEMA, V2_SCHEMA

from kernelaudit.corpus.jobs import Job
from kernelaudit.corpus.store import Flight, JobResult, Store
from kernelaudit.corpus.summary import print_summary, summarise
from kernelaudit.errors import UsageError
from kernelaudit.findings import AuditReport, Finding, report_document


def _report(verdict: str, *failing: str) -> AuditReport:
    findings = tuple(
        Finding(
            id=f"F{i}",
            check=check,
            key=check,
            severity="fail",
            title=f"{check} failed",
            evidence=(("worst error", float("nan")),),
            probe=None,
            original=None,
            occurrences=1,
            probes=3,
        )
        for i, check in enumerate(failing, start=1)
    )
    return AuditReport(
        problem="softmax",
        problem_path="/corpus/softmax/problem.py",
        candidate="k.py::f",
        candidate_path="/corpus/softmax/candidates/k.py",
        candidate_function="f",
        profile="quick",
        device="cpu",
        verdict=verdict,
        findings=findings,
        records=(),
        seconds=1.5,
    )


def _result(key: str, problem: str, report: AuditReport | None, error: str | None = None):
    job = Job(f"/corpus/{problem}/problem.py", f"/corpus/{problem}/candidates/{key}.py::f")
    document = None if report is None else report_document(report)
    return JobResult(key, job, document, error, "cuda:1", 2.5)


def test_a_stored_report_reads_back_as_it_was_written(tmp_path: Path) -> None:
    report = _report("FAIL", "numerics", "unwritten")
    with Store(tmp_path / "c.sqlite") as store:
        store.record(_result("k1", "softmax", report), "quick", ["numerics", "execution"])
        store.record(_result("k2", "softmax", None, "problem.py: no `problem`"), "quick", None)

        (failed, errored) = store.results()
        assert (failed.status, failed.verdict, failed.device) == ("done", "FAIL", "cuda:1")
        assert failed.failing_checks == ("numerics", "unwritten")
        assert failed.checks == "execution,numerics"
        assert (errored.status, errored.verdict, errored.checks) == ("error", None, "all")
        assert errored.error == "problem.py: no `problem`"
        read = store.report("k1")
        # NaN evidence is spelled as a string, as in the JSON reports
        assert read.finding("F1").evidence == (("worst error", "nan"),)
        assert read.to_json() == report_document(report)
        assert [(r.key, r.status) for r in store.results()] == [("k1", "done"), ("k2", "error")]


def test_a_rerun_replaces_the_row_and_counts_the_attempt(tmp_path: Path) -> None:
    with Store(tmp_path / "c.sqlite") as store:
        store.record(_result("k1", "softmax", None, "boom"), "quick", None)
        first = store.results()[0]
        store.record(_result("k1", "softmax", _report("PASS")), "quick", None)
        (again,) = store.results()
    assert (again.status, again.verdict, again.error, again.attempts) == ("done", "PASS", None, 2)
    assert again.finished_at > first.finished_at


def test_a_file_that_is_not_a_corpus_database_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.sqlite").write_text("these are notes")
    with pytest.raises(UsageError, match="is not a corpus database"):
        Store(tmp_path / "notes.sqlite")
    other = sqlite3.connect(tmp_path / "other.sqlite")
    other.execute("CREATE TABLE runs (id INTEGER)")
    other.commit()
    other.close()
    with pytest.raises(UsageError, match="not a kernelaudit corpus database"):
        Store(tmp_path / "other.sqlite")


def test_the_summary_counts_verdicts_failing_checks_and_problems(tmp_path: Path) -> None:
    with Store(tmp_path / "c.sqlite") as store:
        store.record(_result("a", "softmax", _report("PASS")), "quick", None)
        store.record(_result("b", "softmax", _report("FAIL", "numerics")), "quick", None)
        store.record(_result("c", "softmax", _report("FAIL", "numerics", "bounds")), "quick", None)
        store.record(
            _result("d", "gemm", None, "the audit process died (exit code 1)\n..."), "q", None
        )
        summary = summarise(store.results())

    assert summary.outcomes == (
        ("PASS", 1),
        ("FAIL", 2),
        ("error", 1),
        ("timeout", 0),
        ("crash", 0),
        ("unrunnable", 0),
        ("tampered", 0),
    )
    assert summary.failing_checks == (("numerics", 2), ("bounds", 1))
    assert summary.problems == (
        ("gemm", (0, 0, 1, 0, 0, 0, 0)),
        ("softmax", (1, 2, 0, 0, 0, 0, 0)),
    )
    assert not summary.all_passed
    console = Console(record=True, width=120)
    print_summary(console, summary)
    text = console.export_text()
    assert "failing candidates by check" in text
    assert "gemm / d.py::f (error): the audit process died (exit code 1)" in text


def test_a_job_in_flight_counts_its_tries_until_its_result_is_stored(tmp_path: Path) -> None:
    log = tmp_path / "slot-0.log"
    log.write_text("an earlier job's output\n")
    with Store(tmp_path / "c.sqlite") as store:
        assert store.depart(Flight("k1", "cuda:0", str(log), log.stat().st_size)) == 1
        with log.open("a") as out:
            out.write("torch.OutOfMemoryError: CUDA out of memory\n")
        assert store.depart(Flight("k2", "cuda:1", None, 0)) == 1
        flights = store.flights()
        assert flights["k1"].log_tail() == "torch.OutOfMemoryError: CUDA out of memory"
        assert flights["k2"].log_tail() == ""
        store.ended("k1", "the audit process died (killed by SIGKILL)")
        assert store.depart(Flight("k1", "cuda:1", str(log), 0)) == 2
        again = store.flights()["k1"]
        assert (again.device, again.tries) == ("cuda:1", 2)
        assert again.last_end == "the audit process died (killed by SIGKILL)"

        store.record(_result("k1", "softmax", _report("PASS")), "quick", None)
        store.abandon(["k2"])
        assert store.flights() == {}
        assert store.depart(Flight("k2", "cuda:1", None, 0)) == 1


def test_a_job_in_flight_changed_or_forged_in_the_database_counts_no_try(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    log = tmp_path / "slot-0.log"
    log.write_text("")
    with Store(path) as store:
        assert store.depart(Flight("k1", "cuda:0", str(log), 0)) == 1
        assert store.depart(Flight("k2", "cuda:1", str(log), 0)) == 1
        store.record(_result("k9", "softmax", _report("PASS")), "quick", None)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE flights SET log = '/etc/hostname' WHERE key = 'k1'")
        db.execute(
            "INSERT INTO flights (key, device, log, log_start, started_at, tries) "
            "VALUES ('k3', 'cpu', '/etc/hostname', 0, '2026-11-27T00:00:00+00:00', 5)"
        )
        # a result's seal moved onto a flight does not pass for one either
        db.execute("UPDATE flights SET seal = (SELECT seal FROM results) WHERE key = 'k2'")
    with Store(path) as store:
        assert store.flights() == {}
        # a try under a seal that does not hold is not counted, and the row is sealed afresh
        assert store.depart(Flight("k3", "cpu", None, 0)) == 1
        store.ended("k1", "its slot died")  # nothing trusted to update
        assert set(store.flights()) == {"k3"}


def test_a_schema_3_database_keeps_its_results_and_drops_its_unsealed_flights(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v3.sqlite"
    with Store(path) as store:
        store.record(_result("k1", "softmax", _report("PASS")), "quick", None)
    v3_flights = V2_SCHEMA[V2_SCHEMA.index("CREATE TABLE flights") : V2_SCHEMA.index(";\nCREATE")]
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("DROP TABLE flights")
        db.execute(v3_flights)
        db.execute(
            "INSERT INTO flights VALUES ('k2', 'cpu', NULL, 0, '2026-11-27T00:00:00+00:00', 1, "
            "NULL)"
        )
        db.execute("PRAGMA user_version = 3")
    with Store(path) as store:
        assert [r.key for r in store.results()] == ["k1"]
        assert store.flights() == {}
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (4,)


def test_a_schema_1_database_keeps_its_rows_readable_but_trusts_none_of_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as old:
        old.executescript(V1_SCHEMA)
        old.execute(
            "INSERT INTO results (key, problem, candidate, profile, checks, status, verdict, "
            "failing_checks, finished_at) VALUES ('k1', '/corpus/softmax/problem.py', "
            "'/corpus/softmax/candidates/k1.py::f', 'quick', 'all', 'done', 'FAIL', "
            "'[\"numerics\"]', '2026-11-01T00:00:00+00:00')"
        )
        old.commit()

    with Store(path) as store:
        # nothing vouches for a row stored before rows were sealed: none is sealed afterwards
        assert store.results() == []
        (kept,) = store.untrusted()
        assert (kept.key, kept.why) == ("k1", "unsealed")
        assert kept.reason.startswith("unsealed: stored without a seal")
        store.record(_result("k1", "softmax", _report("FAIL", "numerics")), "quick", None)
        timeout = JobResult("k3", kept_job(), None, "no result", "cpu", 9.0, "timeout")
        store.record(timeout, "quick", None)
        assert [(r.key, r.status) for r in store.results()] == [("k1", "done"), ("k3", "timeout")]
        assert store.untrusted() == []
    with Store(path) as store:  # opened again: already this version
        assert [r.attempts for r in store.results()] == [2, 1]
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (4,)


def kept_job() -> Job:
    return Job("/corpus/softmax/problem.py", "/corpus/softmax/candidates/k3.py::f")


def test_a_result_changed_in_the_database_is_not_trusted_and_counts_as_not_audited(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.sqlite"
    with Store(path) as store:
        store.record(_result("k1", "softmax", _report("FAIL", "numerics")), "quick", None)
        store.record(_result("k2", "softmax", _report("PASS")), "quick", None)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE results SET verdict = 'PASS', failing_checks = '[]' WHERE key = 'k1'")

    with Store(path) as store:
        assert [r.key for r in store.results()] == ["k2"]
        (changed,) = store.untrusted()
        assert (changed.key, changed.why) == ("k1", "changed")
        with pytest.raises(UsageError, match="result of job k1 is tampered: changed after"):
            store.report("k1")
        summary = summarise(store.results(), store.untrusted())
    assert summary.outcomes[:2] == (("PASS", 1), ("FAIL", 0))
    console = Console(record=True, width=200)
    print_summary(console, summary)
    text = console.export_text()
    assert "not trusted: 1 stored result(s) whose seal does not hold" in text
    assert "k1 softmax / k1.py::f: tampered: changed after kernelaudit stored it" in text


def test_a_row_without_a_seal_or_sealed_with_another_key_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "here"))
    path = tmp_path / "c.sqlite"
    with Store(path) as store:
        store.record(_result("k1", "softmax", _report("PASS")), "quick", None)
        store.record(_result("k2", "softmax", _report("PASS")), "quick", None)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE results SET seal = NULL WHERE key = 'k1'")
    with Store(path) as store:
        assert [(r.key, r.why) for r in store.untrusted()] == [("k1", "unsealed")]

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "elsewhere"))
    with Store(path) as store:
        assert store.results() == []
        (_, foreign) = store.untrusted()
        assert foreign.why == "foreign"
        assert str(tmp_path / "elsewhere" / "kernelaudit" / "report.key") in foreign.reason


def test_a_trigger_the_store_did_not_create_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    with Store(path) as store:
        # installed behind the open store's back: every verdict it stores is rewritten
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute(
                "CREATE TRIGGER flip AFTER INSERT ON results BEGIN "
                "UPDATE results SET verdict = 'PASS', failing_checks = '[]' "
                "WHERE key = NEW.key; END"
            )
        store.record(_result("k1", "softmax", _report("FAIL", "numerics")), "quick", None)

    with pytest.raises(UsageError) as refused:
        Store(path)
    message = " ".join(str(refused.value).split())
    assert f"{path} holds trigger 'flip', which kernelaudit did not create" in message
    assert 'DROP TRIGGER "flip"' in message and f"delete {path}" in message

    # the fix it gives: the trigger dropped, the result it rewrote is not trusted
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute('DROP TRIGGER "flip"')
    with Store(path) as store:
        assert [(r.key, r.why) for r in store.untrusted()] == [("k1", "changed")]


@pytest.mark.parametrize(
    ("statement", "named"),
    [
        ("CREATE VIEW passing AS SELECT * FROM results", "view 'passing'"),
        ("CREATE TABLE notes (text TEXT)", "table 'notes'"),
        ("CREATE INDEX by_verdict ON results (verdict)", "index 'by_verdict'"),
    ],
)
def test_any_other_object_the_store_did_not_create_is_refused(
    tmp_path: Path, statement: str, named: str
) -> None:
    path = tmp_path / "c.sqlite"
    Store(path).close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute(statement)
    with pytest.raises(UsageError, match=f"holds {named}, which kernelaudit did not create"):
        Store(path)


def test_a_results_table_made_otherwise_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    Store(path).close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("ALTER TABLE results ADD COLUMN note TEXT DEFAULT 'PASS'")
    with pytest.raises(UsageError, match=r"table\(s\) results are not as kernelaudit creates"):
        Store(path)


def test_a_database_of_a_newer_schema_is_refused_with_the_fix(tmp_path: Path) -> None:
    newer = sqlite3.connect(tmp_path / "newer.sqlite")
    newer.executescript("CREATE TABLE results (key TEXT); PRAGMA user_version = 9;")
    newer.close()
    with pytest.raises(UsageError, match=r"written by a newer kernelaudit.*upgrade kernelaudit"):
        Store(tmp_path / "newer.sqlite")
