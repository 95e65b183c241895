"""The index page of a corpus run: every job linked to its own report, in three orders a reader
switches between with links alone."""

from __future__ import annotations

import re
from pathlib import Path

from kernelaudit.checks.base import Probe, RunPlan
from kernelaudit.findings import AuditReport, Finding
from kernelaudit.inputs.case import Case
from kernelaudit.report.html import write_html
from kernelaudit.report.index import IndexEntry, entry_of, write_index


def audited(problem: str, candidate: str, failing_check: str | None) -> AuditReport:
    findings: tuple[Finding, ...] = ()
    if failing_check is not None:
        case = Case(sizes=(("n", 8),), label="workload 0")
        findings = (
            Finding(
                id="F1",
                check=failing_check,
                key=f"{failing_check}:y",
                severity="fail",
                title=f"y fails the {failing_check} check",
                evidence=(),
                probe=Probe(failing_check, case, RunPlan()),
                original=case,
                occurrences=1,
                probes=1,
            ),
        )
    return AuditReport(
        problem=problem,
        problem_path=f"/corpus/{problem}/problem.py",
        candidate=f"{candidate}.py::run",
        candidate_path=f"/corpus/{problem}/{candidate}.py",
        candidate_function="run",
        profile="quick",
        device="cpu",
        verdict="PASS" if failing_check is None else "FAIL",
        findings=findings,
        records=(),
        seconds=2.0,
    )


def rows(document: str, anchor: str) -> list[str]:
    """The candidates of one ordering, top to bottom."""
    start = document.index(f"id='{anchor}'")
    end = document.index("</section>", start)
    return re.findall(r"<tr><td>.*?</td><td>.*?</td><td>(?:<a [^>]*>)?([^<]*)", document[start:end])


def corpus(tmp_path: Path) -> tuple[Path, list[IndexEntry]]:
    reports = tmp_path / "corpus-reports"
    reports.mkdir()
    jobs = [
        ("softmax", "fused", None),
        ("softmax", "online", "numerics"),
        ("layernorm", "welford", None),
        ("layernorm", "two pass", "unwritten"),
        ("gemm", "tiled", "numerics"),
    ]
    entries = []
    for k, (problem, candidate, failing) in enumerate(jobs):
        report = audited(problem, candidate, failing)
        page = reports / f"{k:012x}.html"
        write_html([report], page)
        entries.append(entry_of(report, page))
    entries.append(
        IndexEntry("gemm", "broken.py::run", "timeout", None, headline="no result within 900 s")
    )
    index = reports / "index.html"
    write_index(entries, index)
    return index, entries


def test_the_index_links_every_report_beside_it(tmp_path: Path) -> None:
    index, entries = corpus(tmp_path)
    document = index.read_text()
    linked = set(re.findall(r"href='([^'#]+)'", document))
    pages = {e.page.name for e in entries if e.page is not None}
    assert linked == pages
    assert all((index.parent / name).is_file() for name in linked)
    assert "broken.py::run" in document and "no result within 900 s" in document


def test_a_page_name_that_needs_quoting_is_linked_quoted(tmp_path: Path) -> None:
    page = tmp_path / "two pass #1.html"
    write_html([audited("layernorm", "two pass", "unwritten")], page)
    write_index(
        [entry_of(audited("layernorm", "two pass", "unwritten"), page)], tmp_path / "i.html"
    )
    assert "href='two%20pass%20%231.html'" in (tmp_path / "i.html").read_text()


def test_the_index_orders_by_verdict_failing_check_and_problem(tmp_path: Path) -> None:
    index, _ = corpus(tmp_path)
    document = index.read_text()
    by_verdict = rows(document, "by-verdict")
    assert by_verdict == [
        "tiled.py::run",
        "two pass.py::run",
        "online.py::run",
        "broken.py::run",
        "welford.py::run",
        "fused.py::run",
    ]
    assert rows(document, "by-finding") == [
        "tiled.py::run",
        "online.py::run",
        "two pass.py::run",
        "broken.py::run",
        "welford.py::run",
        "fused.py::run",
    ]
    assert rows(document, "by-problem") == [
        "tiled.py::run",
        "broken.py::run",
        "two pass.py::run",
        "welford.py::run",
        "online.py::run",
        "fused.py::run",
    ]
    for anchor in ("by-verdict", "by-finding", "by-problem"):
        assert f"href='#{anchor}'" in document
    # the order shown until a link picks another: last, so that CSS alone can hide it then
    assert re.findall(r"<section id='([^']+)'", document)[-1] == "by-verdict"
    assert "<script" not in document and "http" not in document
