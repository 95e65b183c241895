"""The plain error figures a benchmark's users read: the largest differences from the truth
where both sides are finite, and whether NaN or Inf appeared in the result."""

from __future__ import annotations

import math

import torch

from kernelaudit.oracle.plain import result_errors

NAN, INF = math.nan, math.inf


def test_the_largest_differences_leave_out_the_elements_either_side_has_non_finite() -> None:
    got = torch.tensor([1.0, NAN, INF, 2.5, -3.0], dtype=torch.bfloat16)
    want = torch.tensor([1.5, 1.0, 2.0, NAN, -2.0], dtype=torch.float64)
    figures = result_errors(got, want)
    # compared: elements 0 (0.5 off 1.5) and 4 (1.0 off 2.0)
    assert figures.absolute == 1.0
    assert figures.relative == 0.5
    assert figures.has_nan and figures.has_inf


def test_a_truth_of_zero_gives_a_relative_error_past_any_bound_not_a_nan() -> None:
    zeros = torch.zeros(2, dtype=torch.float64)
    figures = result_errors(torch.tensor([1e-3, 0.0]), zeros)
    assert figures.absolute == torch.tensor(1e-3).item()
    assert figures.relative > 1e300 and not math.isnan(figures.relative)
    assert not figures.has_nan and not figures.has_inf


def test_a_result_with_no_finite_pair_compares_nothing() -> None:
    want = torch.tensor([1.0, 2.0], dtype=torch.float64)
    figures = result_errors(torch.tensor([NAN, INF]), want)
    assert figures.has_nan and figures.has_inf
    assert (figures.absolute, figures.relative) == (0.0, 0.0)


def test_complex_results_are_compared_by_the_magnitude_of_their_difference() -> None:
    got = torch.tensor([3 + 4j, 1 + 0j], dtype=torch.complex64)
    want = torch.tensor([0 + 0j, 1 + 1j], dtype=torch.complex128)
    figures = result_errors(got, want)
    assert figures.absolute == 5.0
    assert not figures.has_nan


def test_integer_and_bool_results_have_no_nan_or_inf_to_report() -> None:
    ones = torch.ones(2, dtype=torch.float64)
    for got, largest in ((torch.tensor([1, 3]), 2.0), (torch.tensor([True, False]), 1.0)):
        figures = result_errors(got, ones)
        assert figures.absolute == largest
        assert not figures.has_nan and not figures.has_inf
