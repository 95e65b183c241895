"""A corpus database and the files it audits, tampered with from outside the audit: a verdict
rewritten in the database, a trigger installed in it, a problem file rewritten after the run
read it. Each is detected and said; none becomes a verdict."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from running_corpora import IDENTITY, NUMERICS, candidate, rows

from kernelaudit.cli import main
from kernelaudit.corpus import command as corpus_command
from kernelaudit.corpus.jobs import Job, corpus_root, discover, keyed
from kernelaudit.corpus.slot import job_message, run_job
from kernelaudit.corpus.store import JobResult, Store

FAST = ["--profile", "quick", "--checks", "tripwires", "--device", "cpu"]


@pytest.fixture(autouse=True)
def _own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


def _out(capsys: pytest.CaptureFixture[str]) -> str:
    return " ".join(capsys.readouterr().out.split())


def _off_by_one_corpus(tmp_path: Path) -> tuple[Path, str, Job, list[str]]:
    """A corpus of one job, a wrong candidate of the identity problem: its manifest, the job's
    key, the job and the checks `NUMERICS` audits."""
    shutil.copy(IDENTITY, tmp_path / "identity.py")
    (tmp_path / "off_by_one.py").write_text("def off_by_one(x):\n    return x + 1\n")
    manifest = tmp_path / "jobs.jsonl"
    manifest.write_text(
        json.dumps({"problem": "identity.py", "candidate": "off_by_one.py::off_by_one"})
    )
    checks = NUMERICS[NUMERICS.index("--checks") + 1].split(",")
    ((key, job),) = keyed(discover(manifest), "quick", checks, corpus_root(manifest)).items()
    return manifest, key, job, checks


@pytest.mark.slow
def test_a_verdict_rewritten_in_the_database_is_reported_and_its_job_audited_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest, key, job, checks = _off_by_one_corpus(tmp_path)
    db = tmp_path / "results.sqlite"
    with Store(db) as store:
        crashed = JobResult(key, job, None, "its audit process died", "cpu", 1.0, "crash")
        store.record(crashed, "quick", checks)
    # a crash made to read as a pass
    with contextlib.closing(sqlite3.connect(db)) as connection, connection:
        connection.execute("UPDATE results SET status = 'done', verdict = 'PASS', error = NULL")

    assert main(["corpus", "--summary-only", "--db", str(db)]) == 1
    out = _out(capsys)
    assert "no finished jobs in the store" in out
    assert (
        f"{key[:12]} identity / off_by_one.py::off_by_one: tampered: changed after kernelaudit "
        "stored it"
    ) in out

    assert main(["corpus", str(manifest), "--db", str(db), *NUMERICS]) == 1
    out = _out(capsys)
    assert "0 already in" in out and "1 to audit" in out
    assert f"not trusted {key[:12]} identity / off_by_one.py::off_by_one: tampered" in out
    (again,) = rows(db).values()
    assert (again["status"], again["verdict"], again["attempts"]) == ("done", "FAIL", 2)
    with Store(db) as store:
        assert store.untrusted() == []


@pytest.mark.slow
def test_a_job_in_flight_forged_in_the_database_is_audited_not_stored_as_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest, key, _, _ = _off_by_one_corpus(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("the auditor's private notes\n")
    db = tmp_path / "results.sqlite"
    Store(db).close()
    # as a candidate that can write the database would: the job "in flight" twice already,
    # its log a file the candidate wants quoted into the results
    with contextlib.closing(sqlite3.connect(db)) as connection, connection:
        connection.execute(
            "INSERT INTO flights (key, device, log, log_start, started_at, tries) "
            "VALUES (?, 'cpu', ?, 0, '2026-11-27T00:00:00+00:00', 2)",
            (key, str(secret)),
        )

    assert main(["corpus", str(manifest), "--db", str(db), *NUMERICS]) == 1
    (row,) = rows(db).values()
    # audited for real, and failed on its numbers: not a crash, nothing quoted
    assert (row["status"], row["verdict"]) == ("done", "FAIL")
    assert "private notes" not in (row["error"] or "") + (row["report"] or "")
    assert "private notes" not in _out(capsys)


def test_a_trigger_installed_in_the_database_stops_the_run_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "results.sqlite"
    Store(db).close()
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.execute(
            "CREATE TRIGGER pass_everything AFTER INSERT ON results BEGIN "
            "UPDATE results SET verdict = 'PASS' WHERE key = NEW.key; END"
        )
    assert main(["corpus", "--summary-only", "--db", str(db)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{db} holds trigger 'pass_everything', which kernelaudit did not create" in err
    assert 'DROP TRIGGER "pass_everything"' in err


@pytest.mark.slow
def test_a_problem_rewritten_after_the_run_read_it_makes_its_jobs_tampered_and_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    for name, candidates in (("a_identity", ("first", "second")), ("b_identity", ("third",))):
        (corpus / name).mkdir(parents=True)
        shutil.copy(IDENTITY, corpus / name / "problem.py")
        for function in candidates:
            candidate(corpus / name / "candidates", function)
    rewritten = corpus / "a_identity" / "problem.py"
    run_local = corpus_command.run_local

    def rewrite_then_run(*args: Any, **kwargs: Any) -> None:
        # the run has read and hashed every file; no job has started
        rewritten.write_text(rewritten.read_text() + "\nproblem = problem  # rewritten\n")
        run_local(*args, **kwargs)

    monkeypatch.setattr(corpus_command, "run_local", rewrite_then_run)
    db = tmp_path / "results.sqlite"
    assert main(["corpus", str(corpus), "--db", str(db), "--workers", "1", *FAST]) == 1

    stored = rows(db)
    for name in ("first", "second"):
        assert (stored[name]["status"], stored[name]["verdict"]) == ("tampered", None)
        assert stored[name]["error"].startswith(
            f"the problem {rewritten.resolve()} changed after the run read it"
        )
    assert (stored["third"]["status"], stored["third"]["verdict"]) == ("done", "PASS")
    out = _out(capsys)
    assert "tampered a_identity / first.py::first" in out
    assert "a_identity / second.py::second (tampered): the problem" in out


def test_a_file_rewritten_while_its_job_is_audited_is_tampered_not_an_error(
    tmp_path: Path,
) -> None:
    # a problem that rewrites itself when read: the audit fails, and the file changed under it
    problem = tmp_path / "problem.py"
    problem.write_text(
        "from pathlib import Path\n\n"
        "Path(__file__).write_text(Path(__file__).read_text() + '# rewritten\\n')\n"
    )
    kernel = candidate(tmp_path, "copy")
    ((key, job),) = keyed([Job(str(problem), f"{kernel}::copy")], "quick", None, tmp_path).items()
    answer = run_job(job_message(key, job), "quick", ["tripwires"], "cpu")
    assert "error" not in answer and "report" not in answer
    assert answer["tampered"].startswith(f"the problem {problem} changed after the run read it")
