"""Declared input domains: what a kernel's callers guarantee (finite values, contiguous ids),
stated in the problem or on the command line. The audit draws nothing outside them, lists them
as assumed, and still fails a kernel that is wrong inside them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kernelaudit.cli import main
from kernelaudit.engine.audit import audit
from kernelaudit.findings import AuditReport
from kernelaudit.problem.domain import assuming
from kernelaudit.problem.load import load_problem
from kernelaudit.profiles import PROFILES

FIXTURES = Path(__file__).parent / "fixtures"
KERNELS = FIXTURES / "domain_kernels.py"


DEFAULT = replace(PROFILES["default"], boundary_sizes_per_axis=1)
"""The default profile's draws and layouts, at fewer boundary sizes."""
QUICK = replace(PROFILES["quick"], boundary_sizes_per_axis=1)


def _audit(stem: str, candidate: str, assumed: tuple[tuple[str, str], ...] = ()) -> AuditReport:
    problem = assuming(load_problem(FIXTURES / f"{stem}.py"), assumed)
    checks = ["numerics", "mutation"]
    return audit(problem, f"{KERNELS}::{candidate}", DEFAULT, "cpu", checks)


def test_a_maximum_that_skips_nan_fails_where_nan_can_arrive():
    report = _audit("row_max", "max_skipping_nan")
    assert report.verdict == "FAIL"
    assert {dict(r.case.values).get("x") for r in report.records if r.failures} == {"nonfinite"}
    assert report.assumed == ()


def test_declared_finite_it_passes_and_the_report_says_what_was_assumed():
    report = _audit("row_max_finite", "max_skipping_nan")
    assert report.verdict == "PASS"
    assert report.assumed == (("x", "finite"),)
    drawn = {dict(r.case.values).get("x") for r in report.records}
    assert "nonfinite" not in drawn and "neg_inf_rows" not in drawn
    assert {"large", "tiny", "zero_rows"} <= drawn  # every other draw still made


def test_a_wrong_kernel_still_fails_inside_the_declared_domain():
    assert _audit("row_max_finite", "max_of_the_wrong_row").verdict == "FAIL"


def test_a_gather_that_ignores_the_ids_strides_fails_unless_they_are_contiguous():
    loose = _audit("gather_rows", "gather_contiguous_ids")
    assert loose.verdict == "FAIL"
    assert {dict(r.case.layouts).get("ids") for r in loose.records if r.failures} <= {
        "strided",
        "offset",
        "expanded",
        "broadcast",
    }
    stated = _audit("gather_rows", "gather_contiguous_ids", (("ids", "contiguous"),))
    assert stated.verdict == "PASS"
    assert all("ids" not in dict(r.case.layouts) for r in stated.records)
    assert stated.assumed == (("ids", "contiguous"),)
    wrong = _audit("gather_rows", "gather_off_by_one", (("ids", "contiguous"),))
    assert wrong.verdict == "FAIL"


def test_assume_on_the_command_line_reaches_the_report_and_the_reproducer(tmp_path, capsys):
    report_path = tmp_path / "report.json"
    argv = [
        "check",
        str(FIXTURES / "row_max.py"),
        f"{KERNELS}::max_skipping_nan",
        "--device",
        "cpu",
        "--checks",
        "numerics",
        "--profile",
        "quick",
        "--json",
        str(report_path),
        "--assume",
        "x=finite,range:-8:8",
    ]
    assert main(argv) == 0
    assert "assumed x finite,range:-8.0:8.0" in capsys.readouterr().out
    (written,) = json.loads(report_path.read_text())["reports"]
    assert written["assumed"] == {"x": "finite,range:-8.0:8.0"}


@pytest.mark.parametrize(
    ("assume", "message"),
    [
        ("x", "INPUT=PROPERTY"),
        ("x=ascending", "'ascending' is not a property"),
        ("x=sorted", "sorted_ids describes index inputs"),
        ("nothing=finite", "has no tensor input 'nothing'"),
        ("x=min_kept:1", "min_kept describes masks"),
        ("x=range:2:1", "low 2.0 is above high 1.0"),
    ],
)
def test_an_assumption_that_cannot_hold_is_refused_before_any_work(
    assume, message, tmp_path, capsys
):
    argv = ["check", str(FIXTURES / "row_max.py"), f"{KERNELS}::max_skipping_nan"]
    argv += ["--device", "cpu", "--json", str(tmp_path / "r.json"), "--assume", assume]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("candidate", "assumption", "failing_draws"),
    [
        ("max_of_magnitudes", "positive", {"normal", "offset", "heavy_tailed"}),
        ("max_in_half_precision_range", "range:-65504.0:65504.0", {"large", "nonfinite"}),
    ],
)
def test_a_kernel_right_only_inside_a_stated_range_passes_once_it_is_stated(
    candidate: str, assumption: str, failing_draws: set[str]
) -> None:
    loose = _audit("row_max", candidate)
    assert loose.verdict == "FAIL"
    failing = {dict(r.case.values).get("x") for r in loose.records if r.failures}
    assert failing & failing_draws, failing
    stated = _audit("row_max", candidate, (("x", assumption),))
    assert stated.verdict == "PASS", [f.title for f in stated.failures]
    assert stated.assumed == (("x", assumption),)


def test_a_gather_right_only_within_each_rows_length_passes_once_it_is_stated() -> None:
    assert _audit("gather_within_lengths", "gather_treating_past_length_as_padding").verdict == (
        "FAIL"
    )
    said = (("positions", "below:lengths"),)
    stated = _audit("gather_within_lengths", "gather_treating_past_length_as_padding", said)
    assert stated.verdict == "PASS", [f.title for f in stated.failures]
    assert stated.assumed == said


@pytest.mark.parametrize(
    ("candidate", "assumption"),
    [("segment_sum_of_sorted_ids", "sorted"), ("scatter_of_unique_ids", "unique")],
)
def test_a_scatter_that_needs_its_ids_sorted_or_unique_passes_once_it_is_stated(
    candidate: str, assumption: str
) -> None:
    assert _audit("scatter_add_rows", candidate).verdict == "FAIL"
    stated = _audit("scatter_add_rows", candidate, (("ids", assumption),))
    assert stated.verdict == "PASS", [f.title for f in stated.failures]
    assert stated.assumed == (("ids", assumption),)
    drawn = {dict(r.case.values).get("ids") for r in stated.records}
    laid_out = {dict(r.case.layouts).get("ids") for r in stated.records}
    if assumption == "unique":
        # neither the draws made to repeat ids nor the stride-0 views that repeat them
        assert not drawn & {"zipf", "hot"} and not laid_out & {"expanded", "broadcast"}
        # sorted ids still repeat: not what this scatter needs
        sorted_only = _audit("scatter_add_rows", candidate, (("ids", "sorted"),))
        assert sorted_only.verdict == "FAIL"


def test_a_softmax_that_needs_a_kept_element_per_row_passes_once_masks_keep_one():
    # the bundled masked softmax that leaves NaN on fully masked rows: right wherever a row
    # keeps an element, which is what callers that never pad a whole row guarantee (the quick
    # profile's draws: the default's also hold rows of -inf in x, the same empty row another
    # way, which stating the mask alone does not excuse)
    softmax = Path(__file__).parents[2] / "examples" / "softmax"
    candidate = f"{softmax / 'candidates.py'}::nan_on_masked_rows"

    def audited(assumed: tuple[tuple[str, str], ...]) -> AuditReport:
        problem = assuming(load_problem(softmax / "problem.py"), assumed)
        return audit(problem, candidate, QUICK, "cpu", ["numerics"])

    loose = audited(())
    assert loose.verdict == "FAIL"
    assert {dict(r.case.values).get("mask") for r in loose.records if r.failures} == {"masked_rows"}
    stated = audited((("mask", "min_kept:1"),))
    assert stated.verdict == "PASS"
    assert stated.assumed == (("mask", "min_kept:1"),)
    assert "masked_rows" not in {dict(r.case.values).get("mask") for r in stated.records}
