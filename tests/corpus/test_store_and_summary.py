import sqlite3
from pathlib import Path

import pytest
from rich.console import Console
from running_corpora import V1_SCHEMA

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
        assert store.statuses() == {"k1": "done", "k2": "error"}


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
    )
    assert summary.failing_checks == (("numerics", 2), ("bounds", 1))
    assert summary.problems == (("gemm", (0, 0, 1, 0, 0, 0)), ("softmax", (1, 2, 0, 0, 0, 0)))
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


def test_a_schema_1_database_takes_the_new_statuses_and_keeps_its_results(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    old.executescript(V1_SCHEMA)
    old.execute(
        "INSERT INTO results (key, problem, candidate, profile, checks, status, verdict, "
        "failing_checks, finished_at) VALUES ('k1', '/corpus/softmax/problem.py', "
        "'/corpus/softmax/candidates/k1.py::f', 'quick', 'all', 'done', 'FAIL', "
        "'[\"numerics\"]', '2026-11-01T00:00:00+00:00')"
    )
    old.commit()
    old.close()

    with Store(path) as store:
        (kept,) = store.results()
        assert (kept.key, kept.verdict, kept.failing_checks) == ("k1", "FAIL", ("numerics",))
        store.record(_result("k2", "softmax", None, "no result"), "quick", None)
        timeout = JobResult("k3", kept_job(), None, "no result", "cpu", 9.0, "timeout")
        store.record(timeout, "quick", None)
        assert store.statuses() == {"k1": "done", "k2": "error", "k3": "timeout"}
        # only a result stored under a schema 1 key moves to the job's new key
        assert store.adopt_v1({"k1": "new-k1", "k2": "new-k2"}) == 1
        assert store.statuses() == {"new-k1": "done", "k2": "error", "k3": "timeout"}
    with Store(path) as store:  # opened again: already version 2
        assert len(store.results()) == 3


def kept_job() -> Job:
    return Job("/corpus/softmax/problem.py", "/corpus/softmax/candidates/k3.py::f")


def test_a_database_of_a_newer_schema_is_refused_with_the_fix(tmp_path: Path) -> None:
    newer = sqlite3.connect(tmp_path / "newer.sqlite")
    newer.executescript("CREATE TABLE results (key TEXT); PRAGMA user_version = 9;")
    newer.close()
    with pytest.raises(UsageError, match=r"written by a newer kernelaudit.*upgrade kernelaudit"):
        Store(tmp_path / "newer.sqlite")
