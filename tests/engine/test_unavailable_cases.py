"""Cases a problem cannot make inputs for are left out and reported as untried, without
stopping the audit or changing the verdict."""

from pathlib import Path

import pytest

from kernelaudit.engine.audit import audit
from kernelaudit.errors import ProblemError
from kernelaudit.formats import read_problem
from kernelaudit.inputs.batch import infer_batch_axes

pytestmark = pytest.mark.slow
FIXTURE = Path(__file__).parent / "fixtures" / "recorded_inputs.py"


@pytest.mark.parametrize(("candidate", "verdict"), [("doubled", "PASS"), ("tripled", "FAIL")])
def test_cases_without_inputs_are_untried_and_the_rest_judged(candidate, verdict):
    report = audit(
        FIXTURE,
        f"{FIXTURE}::{candidate}",
        profile="quick",
        device="cpu",
        checks=["execution", "numerics"],
    )
    assert report.verdict == verdict
    untried = dict(report.untried)
    assert any("boundary" in what and "no inputs at these sizes" in what for what in untried)
    # the generator's values ran only at the recorded sizes; kernelaudit's own draws ran anywhere
    for record in report.records:
        sizes = dict(record.case.sizes)
        if (sizes["rows"], sizes["cols"]) not in {(64, 32), (128, 32)}:
            assert dict(record.case.values).get("x") not in (None, "get_inputs")


def test_checks_that_try_cases_of_their_own_skip_those_without_inputs():
    # batch-invariance and large-tensors infer the batch axes at a small case of their own,
    # which has no inputs here: they go on to the first workload, which has
    problem = read_problem(FIXTURE)
    assert infer_batch_axes(problem) == ("rows", "cols")


GROUPED = Path(__file__).parent / "fixtures" / "grouped_sums.py"
OUTGROWN = Path(__file__).parent / "fixtures" / "outgrown_truth.py"


def _groups_of_four(sizes: dict[str, int]) -> bool:
    return sizes["cols"] % 4 == 0


def _within_room(sizes: dict[str, int]) -> bool:
    return sizes["cols"] <= 64


@pytest.mark.parametrize(
    ("fixture", "candidate", "verdict", "reason", "judged"),
    [
        (GROUPED, "summed_in_order", "PASS", "the reference cannot run", _groups_of_four),
        (GROUPED, "first_group_doubled", "FAIL", "the reference cannot run", _groups_of_four),
        # the reference's float64 run needs more device memory than is free
        (OUTGROWN, "summed", "PASS", "the float64 truth does not fit", _within_room),
        (OUTGROWN, "first_row_doubled", "FAIL", "the float64 truth does not fit", _within_room),
    ],
)
def test_cases_the_reference_cannot_run_are_untried_and_the_rest_judged(
    fixture, candidate, verdict, reason, judged
):
    report = audit(
        fixture,
        f"{fixture}::{candidate}",
        profile="quick",
        device="cpu",
        checks=["execution", "numerics"],
    )
    assert report.verdict == verdict
    assert any(reason in what for what in dict(report.untried))
    assert report.records
    assert all(judged(dict(r.case.sizes)) for r in report.records)


def _with_workload(fixture: Path, folder: Path, workload: str, instead: str) -> Path:
    """A copy of `fixture` in `folder` whose workload `workload` is `instead`."""
    copy = folder / fixture.name
    copy.write_text(fixture.read_text().replace(workload, instead))
    return copy


def test_a_reference_that_cannot_run_at_a_workload_stops_the_audit_with_the_fix(tmp_path):
    broken = _with_workload(
        GROUPED, tmp_path, '{"rows": 33, "cols": 128}', '{"rows": 3, "cols": 66}'
    )
    with pytest.raises(ProblemError, match="grouped_sums\\(\\) raised RuntimeError"):
        audit(broken, f"{broken}::summed_in_order", "quick", "cpu", ["numerics"])


def test_a_workload_whose_truth_outgrows_the_device_is_a_warning_and_the_rest_judged(tmp_path):
    grown = _with_workload(
        OUTGROWN, tmp_path, '{"rows": 48, "cols": 32}', '{"rows": 48, "cols": 96}'
    )
    report = audit(grown, f"{grown}::summed", "quick", "cpu", ["execution", "numerics"])
    warned = [f for f in report.findings if f.key == "unjudged-workload"]
    assert report.verdict == "PASS"
    assert [f.severity for f in warned] == ["warn"]
    assert "the float64 truth does not fit in device memory" in warned[0].title
    # the untried workload's case is counted as flagged, not failed
    counted = dict(warned[0].evidence)["cases"].values()
    assert "warned on 1 of 1" in counted
    assert all(c.startswith("warned on ") for c in counted)
    assert all(dict(r.case.sizes)["cols"] <= 64 for r in report.records)
    assert report.records


NARROW = Path(__file__).parent / "fixtures" / "narrow_generator.py"
SHORT = Path(__file__).parent / "fixtures" / "short_generator.py"


@pytest.mark.parametrize("fixture", [NARROW, SHORT], ids=["fails", "makes-fewer-rows"])
@pytest.mark.parametrize(("candidate", "verdict"), [("doubled", "PASS"), ("tripled", "FAIL")])
def test_cases_the_problems_generator_cannot_make_are_untried_and_the_rest_judged(
    fixture, candidate, verdict
):
    report = audit(
        fixture, f"{fixture}::{candidate}", "quick", "cpu", checks=["execution", "numerics"]
    )
    assert report.verdict == verdict
    assert any("the input generator cannot make these sizes" in w for w in dict(report.untried))
    assert report.records
    # the generator's values ran only where it can make them; kernelaudit's own draws anywhere
    for record in report.records:
        if dict(record.case.sizes)["cols"] < 32:
            assert dict(record.case.values).get("x") not in (None, "get_inputs")


@pytest.mark.parametrize(
    ("fixture", "words"),
    [(NARROW, "input generator failed for sizes"), (SHORT, "gives \\(16, 8\\) for input 'x'")],
    ids=["fails", "makes-fewer-rows"],
)
def test_a_generator_that_fails_at_a_workload_stops_the_audit_with_the_fix(
    tmp_path, fixture, words
):
    broken = _with_workload(
        fixture, tmp_path, '{"rows": 33, "cols": 64}', '{"rows": 33, "cols": 8}'
    )
    with pytest.raises(ProblemError, match=words):
        audit(broken, f"{broken}::doubled", "quick", "cpu", ["numerics"])


def _grouped_case_bytes(sizes: dict[str, int]) -> int:
    """A grouped-sums case in host memory: its float32 inputs, its four sums a row in float64
    (the truth) and float32 (the baseline)."""
    return sizes["rows"] * sizes["cols"] * 4 + sizes["rows"] * 4 * (8 + 4)


def test_a_workload_whose_truth_outgrows_the_host_is_a_warning_and_the_rest_judged(
    tmp_path, monkeypatch
):
    from kernelaudit.engine import host_memory

    # a host whose half holds a case of the first workload (16 x 64) but not of the second
    room = _grouped_case_bytes({"rows": 16, "cols": 64})
    monkeypatch.setattr(host_memory, "machine_memory", lambda: 2 * room)
    grown = _with_workload(
        GROUPED, tmp_path, '{"rows": 33, "cols": 128}', '{"rows": 48, "cols": 96}'
    )
    report = audit(grown, f"{grown}::summed_in_order", "quick", "cpu", ["numerics"])
    warned = [f for f in report.findings if f.key == "unjudged-workload"]
    assert report.verdict == "PASS"
    assert [f.severity for f in warned] == ["warn"]
    assert "the float64 truth does not fit in host memory" in warned[0].title
    assert "GiB of host memory" in dict(warned[0].evidence)["why"]
    assert report.records
    assert all(_grouped_case_bytes(dict(r.case.sizes)) <= room for r in report.records)
