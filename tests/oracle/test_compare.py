import json
import math
from pathlib import Path

import pytest
import torch

from kernelaudit.oracle.compare import compare
from kernelaudit.oracle.rule import CONSTANTS, budget, noise_floor

F64 = torch.float64
DOCS = Path(__file__).resolve().parents[2] / "docs" / "oracle.md"


def truth_of(shape=(64, 256), seed=0) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randn(*shape, dtype=F64)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_a_correctly_rounded_candidate_passes(dtype):
    t = truth_of()
    result = compare("y", t.to(dtype), t, t.to(dtype), dtype)
    assert result.passed, result.reason
    assert (result.kind, result.reason, result.failure) == ("floating", "", "")
    json.dumps(dict(result.metrics))  # the summary is JSON-able


def test_a_sound_candidate_passes_against_a_rounding_baseline():
    # a different, equally sound summation order: pairwise vs blocked, both in float32
    torch.manual_seed(0)
    x = torch.randn(64, 4096)
    t = x.double().sum(-1, keepdim=True)
    baseline = x.sum(-1, keepdim=True).to(torch.bfloat16)
    candidate = x.reshape(64, 64, 64).sum(-1).sum(-1, keepdim=True).to(torch.bfloat16)
    assert compare("y", candidate, t, baseline, torch.bfloat16).passed


def test_accumulating_thousands_of_terms_in_bfloat16_fails():
    torch.manual_seed(0)
    x = torch.rand(32, 4096).to(torch.bfloat16)
    t = x.double().sum(-1)
    baseline = x.float().sum(-1).to(torch.bfloat16)
    candidate = torch.zeros(32, dtype=torch.bfloat16)
    for j in range(x.shape[1]):
        candidate = candidate + x[:, j]  # every partial sum rounded to bfloat16
    result = compare("s", candidate, t, baseline, torch.bfloat16)
    assert not result.passed
    assert result.failure == "error"
    normwise = next(e for e in result.errors if e.metric == "normwise")
    assert normwise.error_ratio > 50
    assert "error" in result.reason and "limit 4x" in result.reason


def test_a_tf32_sized_perturbation_of_a_float32_result_fails():
    t = truth_of()
    torch.manual_seed(1)
    candidate = (t * (1 + 3e-4 * torch.randn_like(t))).to(torch.float32)
    result = compare("y", candidate, t, t.to(torch.float32), torch.float32)
    assert not result.passed
    assert "float32 budget" in result.reason


def test_a_poor_baseline_cannot_excuse_a_poor_candidate():
    t = truth_of()
    torch.manual_seed(1)
    poor = (t * (1 + 0.1 * torch.randn_like(t))).to(torch.bfloat16)
    result = compare("y", poor, t, poor.clone(), torch.bfloat16)
    assert all(e.error_ratio <= 4 for e in result.errors)
    assert not result.passed
    assert "budget" in result.reason and "whatever the baseline" in result.reason


def test_worst_row_catches_an_error_in_a_few_rows_that_normwise_averages_away():
    t = truth_of((2000, 64))
    candidate = t.clone()
    candidate[1742] *= 1.08
    candidate[3] *= 1.05
    result = compare("y", candidate.to(torch.bfloat16), t, t.to(torch.bfloat16), torch.bfloat16)
    assert not result.passed
    by_metric = {e.metric: e for e in result.errors}
    assert by_metric["normwise"].passed
    assert not by_metric["worst_row"].passed
    assert result.worst_row == 1742
    assert "worst_row error" in result.reason and "(row 1742)" in result.reason


def test_nan_where_the_truth_is_finite_fails_and_says_where():
    t = truth_of((4, 8))
    candidate = t.to(torch.float16)
    candidate[2, 5] = math.nan
    result = compare("y", candidate, t, t.to(torch.float16), torch.float16)
    assert not result.passed
    assert result.failure == "nan-where-finite"
    assert result.mismatches[0].index == (2, 5)
    assert "1 NaN where the truth is finite" in result.reason and "(2, 5)" in result.reason


def test_inf_where_the_truth_is_representable_fails():
    t = truth_of((4, 8))
    candidate = t.to(torch.float16)
    candidate[0, 0] = math.inf
    result = compare("y", candidate, t, t.to(torch.float16), torch.float16)
    assert result.failure == "inf-where-finite"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_where_the_truth_overflows_the_dtype_inf_or_the_largest_value_passes(dtype):
    big = torch.finfo(dtype).max * 4
    t = torch.tensor([1.0, big, -big, 2.0], dtype=F64)
    baseline = t.to(dtype)
    for overflowed in (math.inf, torch.finfo(dtype).max):
        candidate = torch.tensor([1.0, overflowed, -overflowed, 2.0], dtype=dtype)
        result = compare("y", candidate, t, baseline, dtype)
        assert result.passed, result.reason
    wrong = torch.tensor([1.0, 0.0, -math.inf, 2.0], dtype=dtype)
    assert compare("y", wrong, t, baseline, dtype).failure == "wrong-where-overflow"
    swapped = torch.tensor([1.0, -math.inf, math.inf, 2.0], dtype=dtype)
    assert compare("y", swapped, t, baseline, dtype).failure == "wrong-where-overflow"


def test_the_truths_own_nans_and_infinities_must_be_reproduced():
    t = torch.tensor([math.nan, math.inf, -math.inf, 1.0], dtype=F64)
    baseline = t.to(torch.float32)
    assert compare("y", baseline.clone(), t, baseline, torch.float32).passed
    finite = torch.tensor([0.0, math.inf, -math.inf, 1.0])
    assert compare("y", finite, t, baseline, torch.float32).failure == "wrong-where-nan"
    flipped = torch.tensor([math.nan, -math.inf, -math.inf, 1.0])
    assert compare("y", flipped, t, baseline, torch.float32).failure == "wrong-where-inf"


def test_where_no_finite_answer_is_right_the_baselines_nonfinite_values_pass():
    # a sum whose terms overflow with both signs is NaN at the reference's own precision where
    # the float64 truth is merely too large, or infinite; NaN from an infinity times zero
    big = torch.finfo(torch.bfloat16).max * 4
    t = torch.tensor([big, math.inf, math.nan, -big, 1.0], dtype=F64)
    baseline = torch.tensor([math.nan, math.nan, -math.inf, -math.inf, 1.0], dtype=torch.bfloat16)
    assert compare("y", baseline.clone(), t, baseline, torch.bfloat16).passed
    # the truth's own non-finite values pass as before
    truths = torch.tensor([math.inf, math.inf, math.nan, -math.inf, 1.0], dtype=torch.bfloat16)
    assert compare("y", truths, t, baseline, torch.bfloat16).passed
    # neither the truth's class nor the baseline's: an infinity of the other sign, a finite value
    other = torch.tensor([math.nan, math.nan, math.inf, -math.inf, 1.0], dtype=torch.bfloat16)
    assert compare("y", other, t, baseline, torch.bfloat16).failure == "wrong-where-nan"
    finite = torch.tensor([0.0, math.nan, -math.inf, -math.inf, 1.0], dtype=torch.bfloat16)
    assert compare("y", finite, t, baseline, torch.bfloat16).failure == "wrong-where-overflow"


def test_nan_where_the_truth_is_finite_fails_even_where_the_baseline_is_nan():
    t = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    baseline = torch.tensor([1.0, math.nan, 3.0])
    result = compare("y", baseline.clone(), t, baseline, torch.float32)
    assert result.failure == "nan-where-finite"


def test_a_wrong_shape_or_dtype_fails_without_raising():
    t = truth_of((4, 8))
    result = compare("y", torch.zeros(8, 4), t, t.float(), torch.float32)
    assert (result.passed, result.failure) == (False, "shape")
    assert result.reason == "y has shape (8, 4), expected (4, 8)"
    result = compare("y", torch.zeros(4, 8, dtype=torch.half), t, t.float(), torch.float32)
    assert (result.failure, result.reason) == ("dtype", "y is float16, expected float32")


def test_integer_results_must_match_exactly_and_mismatches_are_listed():
    truth = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    candidate = truth.clone()
    candidate[1, 2] = 99
    candidate[2, 0] = -1
    result = compare("idx", candidate, truth, truth.clone(), torch.int64)
    assert (result.kind, result.passed, result.failure) == ("exact", False, "mismatch")
    assert dict(result.metrics)["mismatches"] == 2
    assert [(m.index, m.candidate, m.expected) for m in result.mismatches] == [
        ((1, 2), 99, 6),
        ((2, 0), -1, 8),
    ]
    assert result.reason.startswith("2 of 12 elements of idx differ from the truth")
    assert compare("idx", truth.clone(), truth, truth, torch.int64).passed


def test_bool_results_are_compared_exactly():
    truth = torch.tensor([True, False, True])
    assert not compare("m", ~truth, truth, truth, torch.bool).passed


def test_bit_exact_rule_when_truth_and_baseline_are_exact():
    # small-integer inputs: the truth is representable and the baseline reproduces it
    torch.manual_seed(0)
    t = torch.randint(-8, 8, (16, 32)).to(F64) * 4
    t[7, 3] = 32.0
    exact = t.to(torch.bfloat16)
    candidate = exact.clone()
    candidate[7, 3] = 32.25  # one bfloat16 ulp away
    result = compare("y", candidate, t, exact, torch.bfloat16)
    assert all(e.passed for e in result.errors)  # too small for the metrics
    assert (result.passed, result.failure) == (False, "bit-exact")
    assert [(m.index, m.candidate, m.expected) for m in result.mismatches] == [
        ((7, 3), 32.25, 32.0)
    ]
    assert "bit for bit" in result.reason


def test_bit_exact_rule_does_not_apply_when_the_baseline_rounds():
    t = truth_of((16, 32))
    candidate = t.to(torch.bfloat16)
    candidate[0, 0] = candidate[0, 0] * (1 + 2**-7)
    assert compare("y", candidate, t, t.to(torch.bfloat16), torch.bfloat16).passed


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_flush_to_zero_of_tiny_values_passes(dtype):
    tiny = torch.finfo(dtype).smallest_normal
    t = torch.full((8, 16), tiny / 8, dtype=F64)  # subnormal in dtype, exactly representable
    flushed = torch.zeros(8, 16, dtype=dtype)
    result = compare("y", flushed, t, t.to(dtype), dtype)
    assert result.passed, result.reason


def test_complex_results_are_compared_on_real_and_imaginary_parts():
    t = torch.randn(8, 8, dtype=torch.complex128)
    good = t.to(torch.complex64)
    assert compare("z", good, t, good.clone(), torch.complex64).passed
    bad = good.clone()
    bad[1, 1] += 0.5j
    assert not compare("z", bad, t, good, torch.complex64).passed


def test_floors_and_budgets_follow_the_documented_formulas():
    u32, u_bf16 = 2.0**-24, 2.0**-8
    assert noise_floor("normwise", torch.float32) == 16 * u32
    assert noise_floor("worst_row", torch.bfloat16) == 2 * u_bf16
    assert noise_floor("componentwise", torch.float64) == 4 * 16 * 2.0**-53
    assert budget("normwise", torch.float32) == math.sqrt(u32)
    assert budget("componentwise", torch.bfloat16) == max(4 * 4 * u_bf16, math.sqrt(u_bf16))


def test_every_constant_is_explained_in_the_docs():
    text = DOCS.read_text()
    for constant in CONSTANTS:
        assert constant.name in text, constant.name
