"""Attackers audited in one corpus run beside honest candidates. Each attacker ends in its own
verdict (FAIL for the wrong ones, whatever they tried), and every honest candidate's stored
result and report are those it gets in a run without the attackers; no file the run reads or
writes, and nothing on the auditor's import path, was changed by them."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import site
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from attacks import ARMED, files_in, survivors_after

import kernelaudit
from kernelaudit.cli import main
from kernelaudit.runner.auditor.sandbox import isolation

FIXTURES = Path(__file__).parent / "fixtures"
FAST = ["--profile", "quick", "--checks", "execution,numerics", "--device", "cpu"]

HONEST = {"doubles": "x * 2", "triples": "x * 3"}
"""Candidates that attack nothing: one right, one wrong."""

ATTACKERS = {
    "rewrites_its_siblings": "FAIL",
    "plants_a_module": "FAIL",
    "plants_files": "PASS",  # right, and its writes went nowhere
    "outlives_the_audit": "PASS",
    "signals_the_auditor": "PASS",
}
"""Attackers, and the verdict each earns on its own arithmetic."""

PLANTED_NAMES = ("sitecustomize.py", "usercustomize.py", "matplotlib.py")
PLANTED = "# planted by a candidate\n"
"""What `plants_a_module` writes."""

SURVIVOR = "kernelaudit-redteam-survivor"
"""What `outlives_the_audit`'s process carries on its command line."""

confined = pytest.mark.skipif(
    not isolation().confined, reason=f"no sandbox on this machine: {isolation().reason}"
)


def _run(folder: Path, attackers: bool) -> tuple[int, dict[str, dict[str, Any]], Path]:
    """A corpus of the double problem in `folder/run`, with the attackers or without; the
    command's exit code, the stored rows by candidate file, and the run's folder."""
    run = folder / "run"
    shutil.copytree(FIXTURES / "problem", run / "problem")
    (run / "candidates").mkdir()
    names = list(HONEST)
    for name, body in HONEST.items():
        (run / "candidates" / f"{name}.py").write_text(_source(body))
    if attackers:
        for name in ATTACKERS:
            source = (FIXTURES / "candidates" / f"{name}.py").read_text()
            # a survivor of its own: another test's may be alive meanwhile
            source = source.replace(SURVIVOR, f"{SURVIVOR}-beside-siblings")
            (run / "candidates" / f"{name}.py").write_text(source)
        (run / "candidates" / ARMED).write_text("")
        names += list(ATTACKERS)
    manifest = run / "jobs.jsonl"
    manifest.write_text(
        "".join(
            json.dumps({"problem": "problem/double.py", "candidate": f"candidates/{n}.py::double"})
            + "\n"
            for n in names
        )
    )
    db = run / "results.sqlite"
    code = main(["corpus", str(manifest), "--db", str(db), "--workers", "1", *FAST])
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.row_factory = sqlite3.Row
        stored = connection.execute("SELECT * FROM results").fetchall()
    rows = {Path(row["candidate"].partition("::")[0]).stem: dict(row) for row in stored}
    return code, rows, run


def _source(body: str) -> str:
    return f"def double(x):\n    return {body}\n"


def _judged(row: dict[str, Any], reports: Path) -> tuple[object, ...]:
    """What a stored result says of its candidate, and what its report written beside the
    database says, timing aside."""
    stored = json.loads(row["report"])
    (written,) = json.loads((reports / f"{row['key'][:12]}.json").read_text())["reports"]
    return (
        row["status"],
        row["verdict"],
        row["failing_checks"],
        *(
            (r["verdict"], sorted((f["severity"], f["check"], f["key"]) for f in r["findings"]))
            for r in (stored, written)
        ),
    )


def _planted_places() -> list[Path]:
    """Where the module-planting attacker aims: the import path the candidate's process is
    given (the test's own, kernelaudit's folder first) and the user's site-packages."""
    given = [Path(kernelaudit.__file__).parents[1]]
    given += [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    given += [Path(p) for p in sys.path if p]
    given.append(Path(site.getusersitepackages()))
    return [folder / name for folder in dict.fromkeys(given) for name in PLANTED_NAMES]


@confined
@pytest.mark.slow
def test_attackers_in_a_corpus_change_nothing_of_their_siblings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    auditor_path = tmp_path / "auditor-path"
    auditor_path.mkdir()
    given = (str(auditor_path), os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in given if p))
    aimed = _planted_places()
    before = {place: place.read_bytes() for place in aimed if place.is_file()}
    try:
        alone_code, alone, _ = _run(tmp_path / "alone", attackers=False)
        mixed_code, mixed, run = _run(tmp_path / "mixed", attackers=True)
    finally:
        # what a broken sandbox let through is undone before anything else: files it
        # overwrote put back, files it planted (by their content) removed
        changed = [p for p, data in before.items() if not p.is_file() or p.read_bytes() != data]
        for place in changed:
            place.write_bytes(before[place])
        # the user's site-packages of the candidate's process, under the HOME it was given
        new = [p for p in aimed if p not in before] + list((tmp_path / "home").rglob("*"))
        planted = [p for p in new if p.is_file() and p.read_text(errors="replace") == PLANTED]
        for place in planted:
            place.unlink()
    assert changed == [] and planted == []
    assert alone_code == mixed_code == 1  # `triples` fails in both
    for name in HONEST:
        judged = _judged(alone[name], tmp_path / "alone" / "run" / "results-reports")
        assert _judged(mixed[name], run / "results-reports") == judged
    assert alone["doubles"]["verdict"] == "PASS" and alone["triples"]["verdict"] == "FAIL"
    for name, verdict in ATTACKERS.items():
        assert (mixed[name]["status"], mixed[name]["verdict"]) == ("done", verdict)
    # the problem, the honest candidates and the manifest as written; no file of the run holds
    # a sibling's mark
    assert files_in(run / "problem") == files_in(FIXTURES / "problem")
    for name, body in HONEST.items():
        assert (run / "candidates" / f"{name}.py").read_text() == _source(body)
    marked = [
        path
        for path, data in files_in(run).items()
        if b"# rewritten by a sibling" in data and not path.endswith("rewrites_its_siblings.py")
    ]
    assert marked == []
    assert survivors_after(f"{SURVIVOR}-beside-siblings") == []
