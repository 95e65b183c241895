import math

import pytest
import torch

from kernelaudit.oracle import metrics
from kernelaudit.oracle.metrics import absolute_floor, error_metrics, row_errors

F64 = torch.float64


def test_exact_values_have_zero_error():
    t = torch.randn(5, 7, dtype=F64)
    m = error_metrics(t.clone(), t, torch.float32)
    assert (m.normwise, m.worst_row, m.componentwise) == (0.0, 0.0, 0.0)
    assert m.compared == 35


def test_the_three_metrics_on_a_hand_computed_case():
    t = torch.ones(4, 4, dtype=F64)
    c = t.clone()
    c[2, 1] += 0.1
    m = error_metrics(c, t, torch.float32)
    assert m.normwise == pytest.approx(0.1 / 4)
    assert m.worst_row == pytest.approx(0.1 / 2)  # ||T_r|| = 2
    assert m.worst_row_index == 2
    assert m.componentwise == pytest.approx(0.1)
    assert m.worst_element_index == 2 * 4 + 1
    assert (m.worst_element_value, m.worst_element_truth) == (pytest.approx(1.1), 1.0)


def test_worst_row_finds_an_error_concentrated_in_a_few_rows():
    torch.manual_seed(0)
    t = torch.randn(1000, 64, dtype=F64)
    c = t.clone()
    c[417] *= 1.05
    m = error_metrics(c, t, torch.bfloat16)
    assert m.worst_row_index == 417
    row_norm, rms_row = t[417].norm().item(), t.norm().item() / math.sqrt(1000)
    assert m.worst_row == pytest.approx(0.05 * row_norm / max(row_norm, rms_row), rel=1e-9)
    assert m.normwise < 0.05 / 20  # averaged away over 1000 rows


def test_rows_that_cancel_to_zero_do_not_dominate():
    torch.manual_seed(0)
    t = torch.randn(100, 32, dtype=F64)
    t[5] = 1e-12  # true values that cancelled to about zero
    c = t.clone()
    c[5] += 1e-9  # a tiny absolute error, a huge relative one
    m = error_metrics(c, t, torch.float32)
    rms_row = t.norm() / math.sqrt(100)
    assert m.worst_row == pytest.approx((1e-9 * math.sqrt(32)) / rms_row.item())
    assert m.worst_row < 1e-8


def test_row_errors_lists_every_row():
    t = torch.ones(3, 4, dtype=F64)
    c = t.clone()
    c[1] += 0.5
    assert torch.allclose(row_errors(c, t, torch.float32), torch.tensor([0.0, 0.5, 0.0], dtype=F64))


@pytest.mark.parametrize("shape", [(), (6,)])
def test_zero_and_one_dimensional_results_are_one_row(shape):
    t = torch.full(shape, 2.0, dtype=F64)
    c = t + 0.2
    assert row_errors(c, t, torch.float32).shape == (1,)
    m = error_metrics(c, t, torch.float32)
    assert m.worst_row == pytest.approx(0.1)
    assert m.normwise == pytest.approx(0.1)


def test_non_finite_positions_are_left_out():
    t = torch.tensor([[1.0, math.nan, 3.0], [math.inf, 2.0, 2.0]], dtype=F64)
    c = torch.tensor([[1.0, 5.0, 3.0], [math.inf, math.nan, 2.2]], dtype=F64)
    m = error_metrics(c, t, torch.float32)
    assert m.compared == 3
    assert m.worst_row_index == 1
    assert m.worst_element_index == 5
    assert math.isfinite(m.normwise) and math.isfinite(m.componentwise)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_flush_to_zero_sized_errors_are_not_errors(dtype):
    tiny = torch.finfo(dtype).smallest_normal
    t = torch.full((8, 16), tiny / 4, dtype=F64)  # subnormal in dtype
    c = torch.zeros_like(t)  # flushed
    m = error_metrics(c, t, dtype)
    assert max(m.normwise, m.worst_row, m.componentwise) == 0.0
    assert absolute_floor(dtype) == tiny


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_small_but_normal_low_precision_values_are_judged_in_full(dtype):
    # float16 softmax probabilities over 4096 columns are about 2.4e-4: half of each is wrong
    t = torch.full((8, 4096), 1 / 4096, dtype=F64)
    m = error_metrics((t / 2).to(dtype).double(), t, dtype)
    assert m.normwise > 0.4


def test_huge_float64_values_do_not_overflow_the_norms():
    t = torch.full((3, 5), 1e300, dtype=F64)
    m = error_metrics(t * (1 + 1e-10), t, F64)
    assert m.normwise == pytest.approx(1e-10, rel=1e-4)


def test_large_results_are_measured_in_chunks_with_the_same_answer(monkeypatch):
    torch.manual_seed(0)
    t = torch.randn(300, 50, dtype=F64)
    c = (t + 1e-3 * torch.randn_like(t)).to(torch.bfloat16)
    whole = error_metrics(c, t, torch.bfloat16)
    monkeypatch.setattr(metrics, "_CHUNK_ELEMENTS", 120)
    chunked = error_metrics(c, t, torch.bfloat16)
    assert chunked.worst_row_index == whole.worst_row_index
    assert chunked.worst_element_index == whole.worst_element_index
    assert chunked.normwise == pytest.approx(whole.normwise, rel=1e-12)
    assert chunked.componentwise == pytest.approx(whole.componentwise, rel=1e-12)


def test_empty_results_have_zero_error():
    t = torch.zeros(0, 4, dtype=F64)
    assert error_metrics(t, t, torch.float32).normwise == 0.0


@pytest.mark.parametrize(
    ("dtype", "scale"),
    [
        (torch.float16, 1.0),
        (torch.bfloat16, 2.0**100),
        (torch.float32, 2.0**-140),  # subnormal results
        (torch.float32, 2.0**120),
        (torch.float64, 2.0**600),  # squares past float64's range: still rescaled
    ],
)
def test_a_clean_comparison_gives_the_figures_the_masked_one_does(dtype, scale, monkeypatch):
    monkeypatch.setattr(metrics, "_CHUNK_ELEMENTS", 3 * 257)  # several chunks of rows
    generator = torch.Generator().manual_seed(7)
    truth = (torch.randn(33, 257, dtype=torch.float64, generator=generator) * scale).to(dtype)
    truth = truth.to(torch.float64)
    eps = torch.finfo(dtype).eps
    moved = truth * (1 + eps * torch.randint(-3, 4, truth.shape, generator=generator))
    values = moved.to(dtype).to(torch.float64)
    off = truth[5, 17] * 1.5 + 1e4 * torch.finfo(dtype).smallest_normal  # one element far off
    values[5, 17] = off.to(dtype).to(torch.float64)
    assert metrics.all_clean(values, truth, dtype)
    clean = error_metrics(values, truth, dtype, depth=257, clean=True)
    masked = error_metrics(values, truth, dtype, depth=257)
    assert (clean.worst_row_index, clean.worst_element_index) == (5, 5 * 257 + 17)
    assert (clean.worst_row_index, clean.worst_element_index, clean.compared) == (
        masked.worst_row_index,
        masked.worst_element_index,
        masked.compared,
    )
    for figure in ("normwise", "worst_row", "componentwise"):
        assert getattr(clean, figure) == pytest.approx(getattr(masked, figure), rel=1e-12)
        assert getattr(clean, figure) > 0


def test_only_finite_results_within_range_count_as_clean():
    truth = torch.linspace(-2, 2, 64, dtype=torch.float64)
    assert metrics.all_clean(truth.clone(), truth, torch.float16)
    for bad in (math.nan, math.inf, -math.inf):
        values = truth.clone()
        values[3] = bad
        assert not metrics.all_clean(values, truth, torch.float16)
        assert not metrics.all_clean(truth, values, torch.float16)
    beyond = truth.clone()
    beyond[9] = 70000.0  # past float16's largest
    assert not metrics.all_clean(truth, beyond, torch.float16)
    assert metrics.all_clean(truth, beyond, torch.float32)
    huge = torch.full((4,), 1e308, dtype=torch.float64)  # finite, but its sum is not
    assert not metrics.all_clean(huge, huge, torch.float64)
    assert not metrics.all_clean(truth[:0], truth[:0], torch.float16)
