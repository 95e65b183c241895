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


@pytest.mark.parametrize(
    ("candidate", "verdict"), [("summed_in_order", "PASS"), ("first_group_doubled", "FAIL")]
)
def test_sizes_the_reference_cannot_run_at_are_untried_and_the_rest_judged(candidate, verdict):
    report = audit(
        GROUPED,
        f"{GROUPED}::{candidate}",
        profile="quick",
        device="cpu",
        checks=["execution", "numerics"],
    )
    assert report.verdict == verdict
    untried = dict(report.untried)
    assert any("the reference cannot run at these sizes" in what for what in untried)
    assert all(dict(r.case.sizes)["cols"] % 4 == 0 for r in report.records)


def test_a_reference_that_cannot_run_at_a_workload_stops_the_audit_with_the_fix(tmp_path):
    broken = tmp_path / "grouped_sums.py"
    broken.write_text(
        GROUPED.read_text().replace('{"rows": 33, "cols": 128}', '{"rows": 3, "cols": 66}')
    )
    with pytest.raises(ProblemError, match="grouped_sums\\(\\) raised RuntimeError"):
        audit(broken, f"{broken}::summed_in_order", "quick", "cpu", ["numerics"])
