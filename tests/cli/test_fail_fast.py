"""What the command line refuses before any audit starts: candidates whose source shows they
cannot be called as the problem calls them (exit 1, the whole error, no case run), output
files that could not be written (exit 2); and an internal error, which is not a verdict
(exit 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kernelaudit
from kernelaudit import cli
from kernelaudit.cli import main

ROOT = Path(__file__).parents[1]
PROBLEM = ROOT / "problem" / "fixtures" / "good.py"
FIXTURES = Path(__file__).parent / "fixtures"
UNREADY = FIXTURES / "unready.py"
QUICK = ("--profile", "quick", "--device", "cpu", "--checks", "execution,numerics")


def _check(tmp_path: Path, *candidates: str) -> tuple[int, list[dict]]:
    report = tmp_path / "report.json"
    code = main(["check", str(PROBLEM), *candidates, *QUICK, "--json", str(report)])
    return code, json.loads(report.read_text())["reports"]


def test_a_candidate_that_does_not_compile_fails_with_the_whole_error_before_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, (report,) = _check(tmp_path, f"{FIXTURES / 'broken_syntax.py'}::scale")
    said = capsys.readouterr().out
    assert code == 1 and report["verdict"] == "FAIL"
    assert report["cases"] == []  # nothing was drawn or run
    (finding,) = report["findings"]
    error = finding["evidence"]["error"]
    assert "line 2: SyntaxError: '(' was never closed" in error
    assert "return (x * factor" in error and "^" in error
    assert "'(' was never closed" in said and "return (x * factor" in said


@pytest.mark.parametrize(
    ("function", "words"),
    [
        ("takes_one", "called with 2 argument(s) by position (x, scale), but takes at most 1"),
        ("takes_three", "but requires 3"),
        ("wants_a_name", "but requires out by name"),
    ],
)
def test_a_candidate_whose_function_cannot_take_the_problems_arguments_fails_at_once(
    tmp_path: Path, function: str, words: str
) -> None:
    code, (report,) = _check(tmp_path, f"{UNREADY}::{function}")
    assert code == 1 and report["cases"] == []
    assert words in report["findings"][0]["evidence"]["error"]


def test_functions_that_can_take_the_arguments_are_audited_beside_a_refused_one(
    tmp_path: Path,
) -> None:
    code, reports = _check(
        tmp_path,
        f"{UNREADY}::takes_any",
        f"{UNREADY}::takes_one",
        f"{UNREADY}::scale_with_default",
    )
    assert code == 1
    assert [r["candidate"].split("::")[-1] for r in reports] == [
        "takes_any",
        "takes_one",
        "scale_with_default",
    ]
    assert [r["verdict"] for r in reports] == ["PASS", "FAIL", "PASS"]
    assert reports[0]["cases"] and reports[2]["cases"] and not reports[1]["cases"]


def test_an_output_file_that_cannot_be_written_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    candidate = f"{UNREADY}::takes_any"
    assert main(["check", str(PROBLEM), candidate, *QUICK, "--json", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    inside = blocker / "report.json"
    assert main(["check", str(PROBLEM), candidate, *QUICK, "--json", str(inside)]) == 2
    assert "--json" in capsys.readouterr().err
    # a folder that does not exist yet is made
    deeper = tmp_path / "new" / "folder" / "report.json"
    assert main(["check", str(PROBLEM), candidate, *QUICK, "--json", str(deeper)]) == 0
    assert deeper.is_file()


def test_an_internal_error_exits_3_with_a_short_message_and_its_traceback_in_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def defect(*args: object) -> None:
        raise RuntimeError("an invariant of the reader broke")

    monkeypatch.setattr(cli, "read_problem", defect)
    code = main(["check", str(PROBLEM), f"{UNREADY}::takes_any", "--json", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 3
    assert "internal error" in err and "an invariant of the reader broke" in err
    assert "Traceback" not in err
    written = Path(err.split("the traceback is in ")[1].split(";")[0].strip())
    assert "RuntimeError: an invariant of the reader broke" in written.read_text()
    written.unlink()


def test_the_version_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"kernelaudit {kernelaudit.__version__}"


def test_every_way_into_an_audit_refuses_such_a_candidate_before_it_runs() -> None:
    """The Python API (and so the pytest plugin and a corpus's slots) refuses it as the
    command line does: no worker started, no case drawn."""
    from kernelaudit.engine.audit import audit

    report = audit(PROBLEM, f"{UNREADY}::takes_three", "quick", "cpu", ["numerics"])
    assert report.verdict == "FAIL" and report.records == ()
    (finding,) = report.findings
    assert finding.key == "not-callable" and "but requires 3" in dict(finding.evidence)["error"]
