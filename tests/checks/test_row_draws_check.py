"""The numerics sweep's row draws, end to end: each wrong kernel passes independent N(0, 1)
draws and fails on the rows a model's real inputs have (all-zero rows, rows of -inf, confident
logits, with the labels at their argmax or without labels); each twin passes the same
audit."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kernelaudit.checks.base import PlanContext
from kernelaudit.checks.sweep import value_variants
from kernelaudit.engine.audit import audit
from kernelaudit.findings import AuditReport
from kernelaudit.problem.load import load_problem
from kernelaudit.profiles import PROFILES, Profile

FIXTURES = Path(__file__).parent / "fixtures"
KERNELS = FIXTURES / "row_draw_kernels.py"


DEFAULT_DRAWS = replace(PROFILES["default"], boundary_sizes_per_axis=1, layouts=())
"""The default profile's draws, every one of them, at fewer sizes and layouts than it tries."""


def _audit(stem: str, candidate: str, profile: str | Profile = DEFAULT_DRAWS) -> AuditReport:
    problem = load_problem(FIXTURES / f"{stem}.py")
    return audit(problem, f"{KERNELS}::{candidate}", profile, "cpu", ["numerics"])


def _failing_draws(report: AuditReport) -> set[str]:
    """The value draws of every case that failed, as "input~distribution"."""
    return {
        f"{name}~{drawn}"
        for record in report.records
        if record.failures
        for name, drawn in record.case.values
    }


def test_a_norm_without_epsilon_fails_on_zero_rows_even_in_the_quick_profile():
    report = _audit("row_norm", "norm_without_eps", "quick")
    assert report.verdict == "FAIL"
    assert _failing_draws(report) == {"x~zero_rows"}
    assert any("NaN where the truth is finite" in f.title for f in report.findings)


def test_the_same_norm_with_epsilon_passes():
    assert _audit("row_norm", "norm_with_eps", "quick").verdict == "PASS"


def test_the_normal_draws_alone_do_not_show_a_missing_epsilon():
    normal_only = replace(PROFILES["quick"], float_distributions=("normal", "offset"))
    assert _audit("row_norm", "norm_without_eps", normal_only).verdict == "PASS"


def test_an_unguarded_log_sum_exp_fails_on_rows_of_minus_infinity():
    report = _audit("row_logsumexp", "logsumexp_unguarded")
    assert report.verdict == "FAIL"
    assert "x~neg_inf_rows" in _failing_draws(report)


def test_a_guarded_log_sum_exp_passes():
    assert _audit("row_logsumexp", "logsumexp_guarded").verdict == "PASS"


def test_a_value_on_rows_the_reference_leaves_undefined_is_not_judged():
    # torch.softmax of a row of -inf is NaN; zeros there are as good an answer
    assert _audit("row_softmax", "softmax_zero_on_masked_rows").verdict == "PASS"


def test_rounding_the_log_sum_exp_fails_only_on_confident_labels():
    report = _audit("row_cross_entropy", "cross_entropy_rounded_lse")
    assert report.verdict == "FAIL"
    assert _failing_draws(report) == {"logits~peaked", "target~argmax"}
    failing = [r for r in report.records if r.failures]
    assert all(dict(r.case.values) == {"logits": "peaked", "target": "argmax"} for r in failing)


def test_a_cross_entropy_computed_in_float32_passes_confident_labels():
    assert _audit("row_cross_entropy", "cross_entropy_fp32").verdict == "PASS"


def test_a_rounded_row_statistic_fails_only_on_peaked_rows():
    # no labels: the log of a row's most likely class, near zero only where the row is
    # confident, and there a half-precision log-sum-exp is all of the error
    report = _audit("row_top_logprob", "top_logprob_from_a_rounded_lse")
    assert report.verdict == "FAIL"
    assert _failing_draws(report) == {"x~peaked"}


def test_the_same_statistic_kept_in_float32_passes_peaked_rows():
    assert _audit("row_top_logprob", "top_logprob_in_float32").verdict == "PASS"


@pytest.mark.parametrize("profile", ["quick", "default"])
def test_the_confident_labels_case_is_planned_only_where_the_profile_draws_both(profile):
    problem = load_problem(FIXTURES / "row_cross_entropy.py")
    variants = value_variants(PlanContext(problem, PROFILES[profile], "cpu", 132, None))
    joint = (("logits", "peaked"), ("target", "argmax"))
    assert (joint in variants) == (profile == "default")
