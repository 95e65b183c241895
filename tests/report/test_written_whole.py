"""Every file the auditor writes for its users (the JSON, HTML, JUnit and SARIF reports, a
corpus's index, SOL-ExecBench traces) is written whole, through a file of its own renamed over
the old one: a reader sees the old file or the new one, never half of one, and a link planted
where a report goes is replaced, not written through (without a sandbox a candidate could plant
one to have the auditor overwrite a file it names)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kernelaudit.findings import AuditReport, read_reports, write_reports
from kernelaudit.formats.solexecbench.trace import write_traces
from kernelaudit.report.html import write_html
from kernelaudit.report.index import entry_of, write_index
from kernelaudit.report.junit import write_junit
from kernelaudit.report.sarif import write_sarif


def _report() -> AuditReport:
    return AuditReport(
        problem="softmax",
        problem_path="/examples/softmax/problem.py",
        candidate="candidates.py::fused",
        candidate_path="/examples/softmax/candidates.py",
        candidate_function="fused",
        profile="quick",
        device="cpu",
        verdict="PASS",
        findings=(),
        records=(),
        seconds=1.0,
    )


WRITERS: dict[str, Callable[[list[AuditReport], Path], None]] = {
    "json": write_reports,
    "html": write_html,
    "index": lambda reports, path: write_index([entry_of(r, path) for r in reports], path),
    "junit": lambda reports, path: write_junit(reports, path, "kernelaudit"),
    "sarif": write_sarif,
    "traces": lambda reports, path: write_traces([], path),
}


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_a_link_planted_where_a_report_goes_is_replaced_not_written_through(
    kind: str, tmp_path: Path
) -> None:
    victim = tmp_path / "elsewhere" / "keep.txt"
    victim.parent.mkdir()
    victim.write_text("not the auditor's to write")
    folder = tmp_path / "reports"
    folder.mkdir()
    path = folder / f"report.{kind}"
    path.symlink_to(victim)
    WRITERS[kind]([_report()], path)
    assert victim.read_text() == "not the auditor's to write"
    assert not path.is_symlink() and path.is_file()
    # nothing of the writing is left beside it
    assert [p.name for p in folder.iterdir()] == [path.name]


def test_a_report_written_again_replaces_the_file_a_reader_holds_open(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    write_reports([_report()], path)
    with path.open() as held:
        write_reports([_report(), _report()], path)
        # the reader that opened the first file reads it whole; a new reader sees the second
        assert held.read().count('"candidate"') == 1
    assert len(read_reports(path)) == 2


def test_a_report_gets_the_mode_a_file_written_in_place_would(tmp_path: Path) -> None:
    # shared or served report folders stay readable as they were before reports were renamed
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    for kind, write in sorted(WRITERS.items()):
        path = tmp_path / f"report.{kind}"
        write([_report()], path)
        assert (path.stat().st_mode & 0o777) == (plain.stat().st_mode & 0o777), kind
