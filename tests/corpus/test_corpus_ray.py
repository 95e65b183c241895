"""`kernelaudit corpus --ray` on a real Ray instance started on this machine: its results are
stored exactly as local slots store them."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from running_corpora import IDENTITY, NUMERICS, candidate

from kernelaudit.cli import main

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'kernelaudit[ray]')")

pytestmark = pytest.mark.slow

_WHERE_AND_WHEN = ("device", "seconds", "finished_at", "report", "seal")
"""The columns that say where and when a job ran, not what it gave (and the seal over them)."""


def _stored(db: Path) -> dict[str, dict[str, object]]:
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.row_factory = sqlite3.Row
        found = connection.execute("SELECT * FROM results").fetchall()
    return {row["key"]: dict(row) for row in found}


def test_ray_tasks_store_their_results_like_local_slots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(IDENTITY, tmp_path / "identity.py")
    (tmp_path / "broken.py").write_text("problem = 3\n")
    candidate(tmp_path, "dup")
    manifest = tmp_path / "jobs.json"
    manifest.write_text(
        json.dumps(
            [
                {"problem": "identity.py", "candidate": "dup.py::dup"},
                {"problem": "broken.py", "candidate": "dup.py::dup"},
            ]
        )
    )
    local, on_ray = tmp_path / "local.sqlite", tmp_path / "ray.sqlite"

    assert main(["corpus", str(manifest), "--db", str(local), *NUMERICS]) == 1
    assert not ray.is_initialized()
    argv = ["corpus", str(manifest), "--db", str(on_ray), "--ray", "local", "--workers", "2"]
    assert main([*argv, *NUMERICS]) == 1
    assert not ray.is_initialized()  # the instance started for the run ended with it

    by_slot, by_task = _stored(local), _stored(on_ray)
    assert by_task.keys() == by_slot.keys()
    for key, row in by_task.items():
        assert {c: v for c, v in row.items() if c not in _WHERE_AND_WHEN} == {
            c: v for c, v in by_slot[key].items() if c not in _WHERE_AND_WHEN
        }
        assert (row["device"], by_slot[key]["device"]) == ("ray:cpu", "cpu")
        assert (row["report"] is None) == (by_slot[key]["report"] is None)
    outcomes = sorted(
        (Path(r["problem"]).name, r["status"], r["verdict"]) for r in by_task.values()
    )
    assert outcomes == [("broken.py", "error", None), ("identity.py", "done", "PASS")]
    broken = next(r for r in by_task.values() if r["status"] == "error")
    assert "`problem` is a int, not a Problem" in str(broken["error"])
    # each audited job's reports, named by its key, as for local slots
    passed = next(k for k, r in by_task.items() if r["status"] == "done")
    assert {p.name for p in (tmp_path / "ray-reports").glob("*.json")} == {f"{passed[:12]}.json"}
    out = " ".join(capsys.readouterr().out.split())
    assert "PASS identity / dup.py::dup" in out and "ray:cpu" in out
