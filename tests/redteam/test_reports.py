"""A report file is sealed by the auditor with a key of its user's, which no candidate's sandbox
holds, and written atomically: a report changed afterwards is refused when read back."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from kernelaudit.errors import UsageError
from kernelaudit.findings import AuditReport, read_reports, write_reports
from kernelaudit.report.seal import key_path


@pytest.fixture(autouse=True)
def _own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


def _report(verdict: str) -> AuditReport:
    return AuditReport(
        problem="double",
        problem_path="/problems/double.py",
        candidate="candidate.py::double",
        candidate_path="/candidates/candidate.py",
        candidate_function="double",
        profile="quick",
        device="cpu",
        verdict=verdict,
        findings=(),
        records=(),
        seconds=1.5,
        isolation="bubblewrap: private file system, process ids, user and network",
    )


def test_a_report_reads_back_as_written_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "reports" / "report.json"
    write_reports([_report("FAIL")], path)
    (read,) = read_reports(path)
    assert read.verdict == "FAIL" and read.confined
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]
    assert stat.S_IMODE(key_path().stat().st_mode) == 0o600


def test_a_report_changed_after_it_was_written_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    write_reports([_report("FAIL")], path)
    document = json.loads(path.read_text())
    document["reports"][0]["verdict"] = "PASS"
    path.write_text(json.dumps(document))
    with pytest.raises(UsageError, match="was changed after kernelaudit wrote it"):
        read_reports(path)


def test_a_report_sealed_with_another_key_is_read_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "report.json"
    write_reports([_report("PASS")], path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "elsewhere"))
    (read,) = read_reports(path)
    assert read.verdict == "PASS"
