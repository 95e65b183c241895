"""The JSON report's schema: the reports kernelaudit writes hold to it, every field it writes is
described, and a broken report is refused at the place where it breaks."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernelaudit.checks.base import Probe, RunPlan, Step
from kernelaudit.corpus.jobs import Job
from kernelaudit.corpus.store import JobResult, Store
from kernelaudit.findings import (
    REPORT_FORMAT,
    AuditReport,
    CaseRecord,
    Finding,
    read_reports,
    report_document,
    write_reports,
)
from kernelaudit.inputs.case import Case
from kernelaudit.report.schema import (
    InvalidReport,
    report_schema,
    validate_document,
    validate_report,
)


@pytest.fixture(autouse=True)
def _own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


def everything(finding: Callable[..., Finding], report: Callable[..., AuditReport]) -> AuditReport:
    """A report with every field, and every optional field of its parts, filled."""
    case = Case(
        (("n", 4096), ("hidden", 64)),
        dtype_config=1,
        values=(("x", "outliers"),),
        layouts=(("x", "transposed"),),
        seed=7,
        label="workload 0",
        rows=("n", 3, 4),
    )
    step = Step(
        case=case,
        poison="sentinel",
        reuse=0,
        updated=True,
        keep=False,
        scrub=True,
        settle_s=0.05,
        timed=True,
        profiled=True,
        noise=True,
        threads=4,
        autotune=("_kernel_autotuned", 2),
        memory=True,
        queued=True,
    )
    probe = Probe("replay", case, RunPlan(("nan", "sentinel"), followup=case, steps=(Step(), step)))
    failing = finding(
        "replay",
        "fail",
        "y replays the previous call's output",
        {"worst error": float("nan"), "largest": float("inf"), "rows": [1, 2]},
        probe=probe,
        original=case,
        shrink_steps=("default values", "n=17"),
    )
    return report(
        failing,
        finding("tripwires", "warn", "timer-patching at k.py:3", {"file": "/k.py", "line": 3}),
        records=(CaseRecord("replay", case, ("replayed",), 0.25),),
        environment=(("kernelaudit", "0.1.0"), ("torch", "2.13.0")),
        phases=(("planning", 0.1), ("judging", 0.4)),
        candidate_source="/kernels/solution.json",
        workload_errors=(
            (
                "workload 0",
                {
                    "max_absolute_error": 0.5,
                    "max_relative_error": float("inf"),
                    "has_nan": True,
                    "has_inf": False,
                },
            ),
        ),
        interpretation=("input 'x' read as a float input",),
        check_seconds=(("replay", 1.5),),
        judging_seconds=(("replay", 0.2),),
        planning_seconds=(("replay", 0.01), ("batch axes", 2.5)),
        budget=(
            ("budget_s", 10.0),
            ("planned_s", 8.5),
            ("probes_planned", 12),
            ("probes_untried", 3),
            ("probes_required_untried", 1),
            ("probes_sharing_a_run", 1),
        ),
        untried=(("numerics @ workload 0", 3), ("numerics @ boundary n=1: no inputs", 1)),
        isolation="none (bubblewrap is missing)",
        unverified=(
            ("races", "needs a CUDA device"),
            ("tripwires", "timer-patching at k.py:3: only a run on a GPU can confirm it"),
        ),
        coverage=(("replay", "ran"), ("races", "could not run here: needs a CUDA device")),
        assumed=(("x", "finite"),),
        files_sha256=(("problem", "0" * 64), ("candidate", "f" * 64)),
    )


def refused(document: Any) -> InvalidReport:
    with pytest.raises(InvalidReport) as refusal:
        validate_document(document)
    assert str(refusal.value).startswith(f"{refusal.value.where}: ")
    return refusal.value


@pytest.mark.slow
def test_the_report_file_of_a_real_audit_holds_to_the_schema(checked: Path) -> None:
    document = json.loads(checked.read_text())
    assert [r["verdict"] for r in document["reports"]] == ["PASS", "FAIL"]
    validate_document(document)
    for report in document["reports"]:
        validate_report(report)


@pytest.mark.slow
def test_a_corpus_runs_stored_reports_hold_to_the_schema(checked: Path, tmp_path: Path) -> None:
    reports = read_reports(checked)
    with Store(tmp_path / "corpus.sqlite") as store:
        for n, report in enumerate(reports):
            job = Job(report.problem_path, f"{report.candidate_path}::{report.candidate_function}")
            result = JobResult(f"key{n}", job, report_document(report), None, "cpu", 9.5)
            store.record(result, "quick", None)
        stored = [store.report(result.key) for result in store.results()]
    assert [r.verdict for r in stored] == ["PASS", "FAIL"]
    for report in stored:
        validate_report(report_document(report))


def test_a_report_with_every_optional_field_filled_holds_to_the_schema(
    tmp_path: Path, finding: Callable[..., Finding], report: Callable[..., AuditReport]
) -> None:
    path = tmp_path / "report.json"
    write_reports([everything(finding, report)], path)
    document = json.loads(path.read_text())
    assert document["reports"][0]["workload_errors"]["workload 0"]["max_relative_error"] == "inf"
    validate_document(document)


def test_the_json_names_the_risks_of_the_candidate_this_device_could_not_confirm(
    tmp_path: Path, finding: Callable[..., Finding], report: Callable[..., AuditReport]
) -> None:
    # atomics the static scan saw, on a CPU: a PASS the device could not confirm; races, a
    # check no CPU audit can run for any candidate, is not the candidate's own risk
    cpu = ("races", "needs a CUDA device")
    atomics = finding("tripwires", "note", "atomics at k.py:9", {"file": "/k.py", "line": 9})
    tripwires = ("tripwires", "atomics at k.py:9: needs a GPU")
    seen = report(atomics, unverified=(cpu, tripwires), unconfirmed=("tripwires",))
    path = tmp_path / "report.json"
    write_reports([seen, report(unverified=(cpu,))], path)
    document = json.loads(path.read_text())
    assert [r["unconfirmed"] for r in document["reports"]] == [["tripwires"], []]
    validate_document(document)
    assert [r.unconfirmed for r in read_reports(path)] == [("tripwires",), ()]
    # a report written before the field: what it lists as not verified, where the check found
    # something and failed nothing
    earlier = {k: v for k, v in document["reports"][0].items() if k != "unconfirmed"}
    assert AuditReport.from_json(earlier).unconfirmed == ("tripwires",)
    failing = finding("tripwires", "fail", "atomics at k.py:9", {"file": "/k.py", "line": 9})
    earlier["findings"] = [failing.to_json()]
    assert AuditReport.from_json(earlier).unconfirmed == ()


def test_the_schema_describes_every_field_a_report_writes(
    finding: Callable[..., Finding], report: Callable[..., AuditReport]
) -> None:
    schema = report_schema()
    assert schema["properties"]["format"]["const"] == REPORT_FORMAT
    defs = schema["$defs"]
    written = report_document(everything(finding, report))
    failing = written["findings"][0]
    plan = failing["probe"]["plan"]
    parts = {
        "report": written,
        "finding": failing,
        "probe": failing["probe"],
        "plan": plan,
        "step": plan["steps"][1],
        "case": failing["original_case"],
        "case_record": written["cases"][0],
    }
    for name, data in parts.items():
        undescribed = set(data) - set(defs[name]["properties"])
        assert undescribed == set(), f"{name} fields missing from report.schema.json"


@pytest.mark.parametrize(
    ("breaking", "where", "said"),
    [
        (lambda d: d["reports"][0].pop("verdict"), "$.reports[0].verdict", "is missing"),
        (lambda d: d["reports"][0].update(verdict="MAYBE"), "$.reports[0].verdict", "'MAYBE'"),
        (lambda d: d["reports"][0].update(seconds="fast"), "$.reports[0].seconds", "'fast'"),
        (
            lambda d: d["reports"][0]["findings"][0].update(severity="error"),
            "$.reports[0].findings[0].severity",
            "'error' is not one of",
        ),
        (
            lambda d: d["reports"][0]["cases"][0]["case"]["sizes"].update(n=-1),
            "$.reports[0].cases[0].case.sizes.n",
            "-1 is less than the minimum of 0",
        ),
        (
            lambda d: d["reports"][0]["coverage"].update(races=False),
            "$.reports[0].coverage.races",
            "False is not of type 'string'",
        ),
        (lambda d: d.pop("reports"), "$.reports", "is missing"),
        (
            lambda d: d.update(format="kernelaudit-report/2"),
            "$.format",
            "is 'kernelaudit-report/2', and this kernelaudit reads 'kernelaudit-report/1'",
        ),
    ],
)
def test_a_broken_report_is_refused_naming_where_it_breaks(
    tmp_path: Path,
    finding: Callable[..., Finding],
    report: Callable[..., AuditReport],
    breaking: Callable[[dict[str, Any]], object],
    where: str,
    said: str,
) -> None:
    path = tmp_path / "report.json"
    write_reports([everything(finding, report)], path)
    document = json.loads(path.read_text())
    broken = copy.deepcopy(document)
    breaking(broken)
    refusal = refused(broken)
    assert refusal.where == where
    assert said in str(refusal)


def test_field_names_that_are_not_identifiers_are_quoted_in_the_path(
    tmp_path: Path, finding: Callable[..., Finding], report: Callable[..., AuditReport]
) -> None:
    data = report_document(everything(finding, report))
    data["findings"][0]["probe"]["case"]["values"]["worst x"] = 3
    with pytest.raises(InvalidReport) as refusal:
        validate_report(data)
    assert refusal.value.where == '$.findings[0].probe.case.values["worst x"]'
