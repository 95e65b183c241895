"""A failing call a guard recorded, audited again as a case of its own (`check --case`): the
real job's failure becomes a regression case of the kernel's audit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import kernelaudit
from kernelaudit.cli import main
from kernelaudit.errors import UsageError
from kernelaudit.inputs.materialize import materialize
from kernelaudit.inputs.recorded import recorded_case
from kernelaudit.problem.load import load_problem

from .fixtures import kernels

FIXTURES = Path(__file__).parent / "fixtures"
PROBLEM = FIXTURES / "scale_problem.py"
CANDIDATE = f"{FIXTURES / 'kernels.py'}::scale_wrong_past_4096"


def _record(tmp_path: Path, numel: int = 8192) -> Path:
    fast = kernelaudit.guard(kernels.scale_wrong_past_4096, kernels.scale, records=tmp_path)
    fast(torch.randn(numel))
    (failure,) = fast.flush().failures
    return Path(failure.record)


def _check(tmp_path: Path, *extra: str) -> tuple[int, dict]:
    report = tmp_path / "report.json"
    options = ["--checks", "numerics", "--profile", "quick", "--device", "cpu"]
    code = main(["check", str(PROBLEM), CANDIDATE, *options, "--json", str(report), *extra])
    return code, json.loads(report.read_text())["reports"][0]


@pytest.mark.slow
def test_a_failure_only_the_real_job_saw_fails_the_audit_it_is_added_to(tmp_path: Path) -> None:
    record = _record(tmp_path)
    code, report = _check(tmp_path)
    assert (code, report["verdict"]) == (0, "PASS")  # the drawn sizes never pass 4096
    code, report = _check(tmp_path, "--case", str(record))
    assert (code, report["verdict"]) == (1, "FAIL")
    (finding,) = report["findings"]
    assert finding["check"] == "numerics"
    assert finding["probe"]["case"]["label"] == "recorded call 1 of scale_wrong_past_4096"
    # shrunk: the failure needs the recorded size, not the recorded values
    assert finding["probe"]["case"]["sizes"] == {"n": 8192}
    assert "default values" in finding["shrink_steps"]
    # the finding replays from the report
    assert main(["repro", str(tmp_path / "report.json"), finding["id"], "--device", "cpu"]) == 1


def test_a_recorded_call_that_does_not_fit_the_problem_is_refused(tmp_path: Path) -> None:
    problem = load_problem(PROBLEM)
    fast = kernelaudit.guard(
        kernels.embedding_backward_fp16_sums, kernels.embedding_backward, records=tmp_path
    )
    ids = torch.zeros(3000, dtype=torch.long)
    fast(torch.rand(3000, 4).to(torch.float16), ids, 4)
    (failure,) = fast.flush().failures
    with pytest.raises(UsageError, match="has 3 argument"):
        recorded_case(problem, Path(failure.record))
    float64_call = _record(tmp_path / "wide", numel=8192)
    record = json.loads(float64_call.read_text())
    assert record["arguments"][0]["dtype"] == "torch.float32"
    wrong_dtype = kernelaudit.guard(
        kernels.scale_wrong_past_4096, kernels.scale, records=tmp_path / "f64"
    )
    wrong_dtype(torch.randn(8192, dtype=torch.float64))
    (failure,) = wrong_dtype.flush().failures
    with pytest.raises(UsageError, match="none of problem 'scale'"):
        recorded_case(problem, Path(failure.record))


def test_a_recorded_case_is_made_of_the_calls_inputs_and_of_nothing_else(tmp_path: Path) -> None:
    from kernelaudit.errors import CaseUnavailable
    from kernelaudit.inputs.recorded import RECORDED

    problem = load_problem(PROBLEM)
    x = torch.randn(8192)
    fast = kernelaudit.guard(kernels.scale_wrong_past_4096, kernels.scale, records=tmp_path)
    fast(x)
    (failure,) = fast.flush().failures
    case = recorded_case(problem, Path(failure.record))
    assert dict(case.sizes) == {"n": 8192}
    assert dict(case.values)["x"].startswith(RECORDED)
    assert torch.equal(materialize(problem, case)["x"], x)
    with pytest.raises(CaseUnavailable):
        materialize(problem, case.with_sizes({"n": 100}))


def test_a_guards_records_are_written_whole_over_links_planted_in_their_place(
    tmp_path: Path,
) -> None:
    # the names a failing call's record and the guard's summary take
    first = _record(tmp_path / "first")
    names = [p.name for p in first.parent.iterdir()]
    names.append("scale_wrong_past_4096-summary.json")
    assert any(n.endswith(".safetensors") for n in names)
    victim = tmp_path / "keep.txt"
    victim.write_text("not the guard's to write")
    folder = tmp_path / "records"
    folder.mkdir()
    for name in names:
        (folder / name).symlink_to(victim)
    fast = kernelaudit.guard(kernels.scale_wrong_past_4096, kernels.scale, records=folder)
    x = torch.randn(8192)
    fast(x)
    (failure,) = fast.flush().failures
    fast.close()
    assert victim.read_text() == "not the guard's to write"
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)
    assert not any(p.is_symlink() for p in folder.iterdir())
    case = recorded_case(load_problem(PROBLEM), Path(failure.record))
    assert torch.equal(materialize(load_problem(PROBLEM), case)["x"], x)
