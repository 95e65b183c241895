import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernelaudit.cli import main
from kernelaudit.inputs import scheme

ROOT = Path(__file__).parents[1]
PROBLEM = ROOT / "problem" / "fixtures" / "good.py"
CANDIDATES = Path(__file__).parent / "fixtures" / "candidates.py"

pytestmark = pytest.mark.slow


def _check(tmp_path: Path, *names: str) -> tuple[int, dict]:
    report = tmp_path / "report.json"
    code = main(
        [
            "check",
            str(PROBLEM),
            *(f"{CANDIDATES}::{n}" for n in names),
            "--profile",
            "quick",
            "--device",
            "cpu",
            # what these tests look at: the CLI's handling of verdicts, findings and reports
            # (every check's own behaviour is tested with the check)
            "--checks",
            "execution,unwritten,numerics",
            "--json",
            str(report),
        ]
    )
    return code, json.loads(report.read_text())


def test_a_passing_candidate_exits_0_and_a_failing_one_exits_1(tmp_path: Path) -> None:
    code, document = _check(tmp_path, "scale")
    assert code == 0
    assert [r["verdict"] for r in document["reports"]] == ["PASS"]
    code, document = _check(tmp_path, "scale", "scale_in_half")
    assert code == 1
    assert [r["verdict"] for r in document["reports"]] == ["PASS", "FAIL"]


def test_the_command_ends_with_the_verdicts_exit_code_and_every_line_written(
    tmp_path: Path,
) -> None:
    """`kernelaudit check` (the command, its first worker started before torch is imported)
    ends its process as soon as it is done: nothing it prints or writes may be lost on the way,
    and the exit code is still the verdict's."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelaudit",
            "check",
            str(PROBLEM),
            f"{CANDIDATES}::scale",
            f"{CANDIDATES}::scale_in_half",
            "--profile",
            "quick",
            "--device",
            "cpu",
            "--checks",
            "execution,numerics",
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stdout.rstrip().endswith(f"HTML report: {report.with_suffix('.html')}")
    document = json.loads(report.read_text())
    assert [r["verdict"] for r in document["reports"]] == ["PASS", "FAIL"]
    assert report.with_suffix(".html").read_text().rstrip().endswith("</html>")


def test_repro_replays_a_finding_from_the_json_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = _check(tmp_path, "leave_second_half")
    assert code == 1
    findings = document["reports"][0]["findings"]
    unwritten = next(f for f in findings if f["check"] == "unwritten")
    capsys.readouterr()
    page = tmp_path / "replay.html"
    replay = ["repro", str(tmp_path / "report.json"), unwritten["id"], "--device", "cpu"]
    code = main([*replay, "--html", str(page)])
    out = capsys.readouterr().out
    assert code == 1
    assert "reproduced" in out
    assert "never written" in out
    # the replay's own page: the finding as the replay saw it, and nothing else
    html = page.read_text()
    assert unwritten["id"] in html and "never written" in html and "http" not in html
    assert sum(f["id"] in html for f in findings if f["id"] != unwritten["id"]) == 0


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["check", "missing_problem.py", f"{CANDIDATES}::scale"], "does not exist"),
        (["check", str(PROBLEM), f"{CANDIDATES}::no_such_function"], "no_such_function"),
        (["check", str(PROBLEM), str(CANDIDATES)], "::"),
        (["check", str(PROBLEM), f"{ROOT}/nowhere.py::scale"], "nowhere.py"),
        (
            [
                "check",
                str(ROOT / "problem" / "fixtures" / "unknown_field.py"),
                f"{CANDIDATES}::scale",
            ],
            "wrkloads",
        ),
        (["check", str(PROBLEM), f"{CANDIDATES}::scale", "--checks", "numerix"], "numerix"),
        (["repro", "no_report.json", "F1"], "does not exist"),
        (
            [
                "check",
                str(PROBLEM),
                f"{CANDIDATES}::scale",
                *("--device", "cpu", "--checks", "numerics,races"),
            ],
            "'races', which cannot run here (cpu",
        ),
    ],
)
def test_usage_errors_exit_2_with_an_actionable_message(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main([*argv, *(["--json", str(tmp_path / "r.json")] if argv[0] == "check" else [])])
    err = capsys.readouterr().err
    assert code == 2
    assert words in err
    assert "Traceback" not in err


def test_several_candidates_get_finding_ids_unique_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = _check(tmp_path, "scale_in_half", "leave_second_half")
    ids = [f["id"] for r in document["reports"] for f in r["findings"]]
    assert code == 1
    assert len(ids) == len(set(ids))
    assert all(i.startswith(("C1.", "C2.")) for i in ids)
    # the report names the problem by absolute path, so it replays from any directory
    assert all(Path(r["problem_path"]).is_absolute() for r in document["reports"])
    second = next(f["id"] for f in document["reports"][1]["findings"] if f["check"] == "unwritten")
    capsys.readouterr()
    assert main(["repro", str(tmp_path / "report.json"), second, "--device", "cpu"]) == 1
    assert "leave_second_half" in capsys.readouterr().out


def test_the_json_report_is_strict_json_even_with_nan_evidence(tmp_path: Path) -> None:
    _check(tmp_path, "leave_second_half")

    def refuse(constant: str) -> None:
        raise AssertionError(f"non-standard JSON constant {constant}")

    json.loads((tmp_path / "report.json").read_text(), parse_constant=refuse)


def test_checks_that_cannot_run_here_are_refused_when_named_and_fail_under_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "check",
        str(PROBLEM),
        f"{CANDIDATES}::scale",
        *("--profile", "quick", "--device", "cpu", "--json", str(tmp_path / "r.json")),
        *("--checks", "execution,numerics,sanitizer"),
    ]
    assert main(argv) == 2  # the sanitizer cannot run on a CPU: refused before any work
    argv[-1] = "execution,numerics"
    assert main(argv) == 0  # nothing chosen needs a GPU
    assert json.loads((tmp_path / "r.json").read_text())["reports"][0]["unverified"] == {}
    argv[-1] = "kernels"  # runs in part on a CPU: allowed, and what it did not see is listed
    capsys.readouterr()
    assert main([*argv, "--strict"]) == 1
    out = capsys.readouterr().out
    assert "not verified on cpu: kernels (needs a CUDA device" in out
    assert "--strict: exiting 1" in out
    report = json.loads((tmp_path / "r.json").read_text())["reports"][0]
    assert report["verdict"] == "PASS" and list(report["unverified"]) == ["kernels"]


def test_repro_says_when_the_candidate_or_the_draws_are_not_the_ones_the_report_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    candidates = tmp_path / "candidates.py"
    candidates.write_text(CANDIDATES.read_text())
    report = tmp_path / "report.json"
    argv = ["check", str(PROBLEM), f"{candidates}::leave_second_half", "--profile", "quick"]
    argv += ["--device", "cpu", "--checks", "execution,unwritten", "--json", str(report)]
    assert main(argv) == 1
    document = json.loads(report.read_text())["reports"][0]
    assert set(document["files_sha256"]) == {"problem", "candidate"}
    finding = document["findings"][0]["id"]
    capsys.readouterr()
    main(["repro", str(report), finding, "--device", "cpu"])
    out = capsys.readouterr().out
    assert "changed after the run read it" not in out and "inputs were drawn by" not in out
    candidates.write_text(CANDIDATES.read_text() + "\n# edited since the audit\n")
    assert main(["repro", str(report), finding, "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert f"the candidate {candidates} changed after the run read it" in out
    assert "reproduced" in out
    # a kernelaudit that draws its inputs another way than the one that wrote the report
    assert document["environment"]["input draws"] == scheme.SCHEME
    monkeypatch.setattr(scheme, "SCHEME", "another-scheme")
    main(["repro", str(report), finding, "--device", "cpu"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"the report's inputs were drawn by {document['environment']['input draws']}" in out
    assert "holds other values than the audit's" in out
