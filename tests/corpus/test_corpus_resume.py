"""Resuming a corpus from wherever it lies: keys that do not depend on the working directory or
the corpus's folder, problems this machine cannot run stored once, databases of an older
schema read on, and why a stored job is audited again."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from running_corpora import IDENTITY, NUMERICS, V2_SCHEMA, candidate, identity_at, rows

from kernelaudit.cli import main
from kernelaudit.corpus.jobs import corpus_root, discover, keyed

NUMERICS_CHECKS = NUMERICS[NUMERICS.index("--checks") + 1].split(",")


def _corpus(root: Path) -> None:
    """A directory layout of two problems, and a manifest in its root listing the same jobs."""
    for name, text in (("ident", identity_at("8", "16")), ("huge", identity_at("2**20", "2**20"))):
        (root / name).mkdir(parents=True)
        (root / name / "problem.py").write_text(text)
        candidate(root / name / "candidates", "dup")
    (root / "jobs.jsonl").write_text(
        "".join(
            json.dumps({"problem": f"{n}/problem.py", "candidate": f"{n}/candidates/dup.py::dup"})
            + "\n"
            for n in ("huge", "ident")
        )
    )


@pytest.mark.slow
def test_a_copied_corpus_resumes_from_another_folder_without_auditing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "first"
    _corpus(first / "corpus")
    monkeypatch.chdir(first)
    argv = ["corpus", "corpus", "--db", "corpus/results.sqlite", *NUMERICS]
    assert main(argv) == 1  # one job cannot run here

    before = rows_by_problem(first / "corpus" / "results.sqlite")
    huge, ident = before
    assert (ident["status"], ident["verdict"]) == ("done", "PASS")
    assert (huge["status"], huge["verdict"]) == ("unrunnable", None)
    assert "smallest workload needs at least" in huge["error"]
    assert "more than the" in huge["error"] and "memory" in huge["error"]
    out = " ".join(capsys.readouterr().out.split())
    assert "unrunnable huge / dup.py::dup" in out

    moved = tmp_path / "elsewhere" / "moved"
    shutil.copytree(first / "corpus", moved)
    shutil.rmtree(first)
    monkeypatch.chdir(tmp_path)
    db = moved / "results.sqlite"
    for source, flags in (
        (moved, []),
        (moved / "jobs.jsonl", []),  # the manifest in the root keys its jobs alike
        (moved, ["--rerun-errors"]),  # unrunnable is not an error to retry
    ):
        assert main(["corpus", str(source), "--db", str(db), *NUMERICS, *flags]) == 1
        out = " ".join(capsys.readouterr().out.split())
        assert "2 already in" in out and "0 to audit" in out
    assert rows_by_problem(db) == before


def rows_by_problem(db: Path) -> list[dict[str, object]]:
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.row_factory = sqlite3.Row
        found = connection.execute("SELECT * FROM results ORDER BY problem").fetchall()
    return [dict(row) for row in found]


def test_keys_follow_the_corpus_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _corpus(tmp_path / "a" / "corpus")
    shutil.copytree(tmp_path / "a" / "corpus", tmp_path / "b" / "deeper" / "corpus")
    keys = []
    for where, source in (
        (tmp_path / "a", Path("corpus")),
        (tmp_path, Path("b/deeper/corpus")),
        (tmp_path / "b", Path("deeper/corpus/jobs.jsonl")),
    ):
        monkeypatch.chdir(where)
        keys.append(set(keyed(discover(source), "quick", None, corpus_root(source))))
    assert len(keys[0]) == 2
    assert keys[0] == keys[1] == keys[2]


@pytest.mark.slow
def test_a_resumed_run_says_why_it_audits_a_stored_job_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(IDENTITY, tmp_path / "identity.py")
    kept = candidate(tmp_path, "kept")
    manifest = tmp_path / "jobs.jsonl"
    manifest.write_text(json.dumps({"problem": "identity.py", "candidate": "kept.py::kept"}))
    root = corpus_root(manifest)
    ((key, job),) = keyed(discover(manifest), "quick", NUMERICS_CHECKS, root).items()
    db = tmp_path / "old.sqlite"
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.executescript(V2_SCHEMA)
        connection.execute(
            "INSERT INTO results (key, problem, candidate, profile, checks, status, verdict, "
            "finished_at) VALUES (?, ?, ?, 'quick', 'execution,numerics', 'done', 'PASS', "
            "'2026-11-01T00:00:00+00:00')",
            (key, job.problem, job.candidate),
        )
        connection.commit()
    argv = ["corpus", str(manifest), "--db", str(db), *NUMERICS]

    # a result stored before rows were sealed: nothing vouches for it
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "0 already in" in out and "1 to audit" in out
    assert f"not trusted {key[:12]} identity / kept.py::kept: unsealed: stored without" in out
    (row,) = rows(db).values()
    assert (row["status"], row["verdict"], row["attempts"]) == ("done", "PASS", 2)
    assert row["seal"] is not None and row["candidate_sha256"] == job.candidate_sha256
    with contextlib.closing(sqlite3.connect(db)) as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (4,)

    # a candidate edited since its result was stored
    kept.write_text("def kept(x):\n    return x.clone()  # edited\n")
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "0 already in" in out and "1 to audit" in out
    assert (
        f"changed identity / kept.py::kept: its candidate {kept.resolve()} changed since its "
        f"result of {row['finished_at']} was stored; its job runs again"
    ) in out
