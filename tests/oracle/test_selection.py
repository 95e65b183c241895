"""Indices a reference chooses by comparing floats (top-k, argmax, sort) are judged by the
scores they select: a near tie at the reference's precision may go either way, and a wrong,
repeated or out-of-range index still fails."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernelaudit.checks.numerics import compare_expected
from kernelaudit.engine.audit import audit
from kernelaudit.oracle.selection import Along, Selection, ties
from kernelaudit.oracle.truth import expected
from kernelaudit.problem.spec import Output, Problem, TensorInput
from kernelaudit.profiles import PROFILES
from kernelaudit.sourcefile import import_source

FIXTURES = Path(__file__).parents[1] / "checks" / "fixtures"
ROUTERS = FIXTURES / "router_kernels.py"
ROUTER = import_source(FIXTURES / "expert_router.py", "expert_router", folder_on_path=False)
CPU = torch.device("cpu")


def _selection(
    scores: list[list[float]], tolerance: float = 0.0, distinct: bool = True, ranked: bool = True
) -> Selection:
    along = Along(dim=1, keepdim=True, distinct=distinct, ranked=ranked, largest=True)
    return Selection(torch.tensor(scores, dtype=torch.float64), along, tolerance)


def test_an_index_whose_score_ties_with_the_truths_is_accepted_and_no_other():
    selection = _selection([[0.9, 0.5, 0.9, 0.1]])
    truth = torch.tensor([[0, 1]])
    assert ties(torch.tensor([[2, 1]]), truth, selection).tolist() == [[True, False]]
    assert ties(torch.tensor([[3, 1]]), truth, selection).tolist() == [[False, False]]


def test_the_tolerance_is_what_separates_a_near_tie_from_a_different_score():
    truth = torch.tensor([[0]])
    near = _selection([[0.9, 0.8999]], tolerance=1e-3, distinct=False)
    assert ties(torch.tensor([[1]]), truth, near).all()
    assert not ties(torch.tensor([[1]]), truth, replace(near, tolerance=1e-5)).any()


def test_repeated_and_out_of_range_indices_are_never_accepted():
    selection = _selection([[0.5, 0.5, 0.5, 0.5]])
    truth = torch.tensor([[0, 1]])
    assert not ties(torch.tensor([[2, 2]]), truth, selection).any()
    assert not ties(torch.tensor([[7, 1]]), truth, selection).any()
    assert not ties(torch.tensor([[-1, 1]]), truth, selection).any()
    assert ties(torch.tensor([[2, 3]]), truth, selection).all()


def test_where_the_order_is_unspecified_only_the_scores_selected_count():
    """A top-k with `sorted=False`: the same experts in another order, or one near-tied expert
    in place of another (which shifts every index after it), select the same scores."""
    selection = _selection([[0.9, 0.1, 0.5, 0.30001, 0.3]], tolerance=1e-4, ranked=False)
    truth = torch.tensor([[0, 2, 4]])
    assert ties(torch.tensor([[2, 0, 4]]), truth, selection).tolist() == [[True, True, False]]
    assert ties(torch.tensor([[0, 2, 3]]), truth, selection).tolist() == [[False, False, True]]
    assert not ties(torch.tensor([[0, 1, 2]]), truth, selection).any()
    assert not ties(torch.tensor([[0, 0, 2]]), truth, selection).any()


def test_a_slice_an_earlier_near_tie_decided_may_be_the_references_own_answer():
    """The truth's scores at the other answer are not close (an earlier choice masked them),
    but a choice on the way hung on a near tie: the reference's own native answer passes
    there, in any order, and nothing else does."""
    selection = replace(
        _selection([[0.9, 0.8, -math.inf, -math.inf]], ranked=False),
        undecided=torch.tensor([True]),
    )
    truth, native = torch.tensor([[0, 1]]), torch.tensor([[2, 3]])
    assert ties(torch.tensor([[3, 2]]), truth, selection, native).all()
    assert not ties(torch.tensor([[3, 1]]), truth, selection, native).any()
    decided = replace(selection, undecided=torch.tensor([False]))
    assert not ties(torch.tensor([[2, 3]]), truth, decided, native).any()


def test_an_argmax_without_its_dimension_kept_is_judged_along_it():
    along = Along(dim=1, keepdim=False, distinct=False, ranked=True, largest=True)
    selection = Selection(torch.tensor([[1.0, 3.0, 3.0]], dtype=torch.float64), along, 0.0)
    assert ties(torch.tensor([2]), torch.tensor([1]), selection).tolist() == [True]
    assert ties(torch.tensor([0]), torch.tensor([1]), selection).tolist() == [False]


def _argmax_problem() -> Problem:
    def first_best(x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.bfloat16).float().argmax(dim=-1).to(torch.int32)

    return Problem(
        name="first_best",
        reference=first_best,
        axes=("rows", "cols"),
        inputs=(TensorInput("x", ("rows", "cols")),),
        outputs=(Output("best", ("rows",), dtype=torch.int32),),
        workloads=({"rows": 512, "cols": 256},),
    )


def test_the_truth_knows_which_outputs_are_selections_and_how_closely_scores_tie():
    problem = _argmax_problem()
    x = torch.randn(512, 256, generator=torch.Generator().manual_seed(0))
    expect = expected(problem, {"x": x}, {"x": torch.float32}, "cpu")
    (selection,) = expect.selections
    assert selection is not None and selection.along.dim == 1 and not selection.along.keepdim
    # the baseline rounds the scores to bfloat16 before choosing: about 2^-9 of |x| <= 5
    assert 1e-4 < selection.tolerance < 0.05
    native = x.to(torch.bfloat16).float().argmax(dim=-1).to(torch.int32)
    assert not torch.equal(native, expect.truth[0]), "rounding decides some rows"
    assert compare_expected(expect, 0, native, CPU).passed
    wrong = x.argmin(dim=-1).to(torch.int32)
    assert not compare_expected(expect, 0, wrong, CPU).passed


def test_integer_results_computed_otherwise_keep_the_exact_rule():
    problem = replace(
        _argmax_problem(),
        reference=lambda x: (x > 0).sum(dim=-1).to(torch.int32),
        name="positives",
    )
    x = torch.randn(512, 256, generator=torch.Generator().manual_seed(0))
    expect = expected(problem, {"x": x}, {"x": torch.float32}, "cpu")
    assert expect.selections == (None,)
    assert not compare_expected(expect, 0, expect.truth[0] + 1, CPU).passed


DEFAULT = replace(PROFILES["default"], boundary_sizes_per_axis=1)


@pytest.mark.parametrize(
    ("router", "verdict"),
    [
        ("rounds_as_the_reference_does", "PASS"),
        ("rounds_nothing", "PASS"),
        ("keeps_the_worst_experts", "FAIL"),
        ("keeps_the_best_expert_four_times", "FAIL"),
    ],
)
def test_a_router_is_judged_by_the_experts_it_picks(router: str, verdict: str):
    report = audit(ROUTER.problem, f"{ROUTERS}::{router}", DEFAULT, "cpu", ["numerics"])
    assert report.verdict == verdict, [f.title for f in report.findings]


@pytest.mark.parametrize(
    ("router", "verdict"),
    [
        ("rounds_as_the_reference_does", "PASS"),
        ("in_expert_order", "PASS"),
        ("rounds_nothing", "PASS"),
        ("keeps_the_worst_experts", "FAIL"),
    ],
)
def test_a_router_that_keeps_its_experts_unordered_is_judged_by_which_it_keeps(
    router: str, verdict: str
):
    report = audit(ROUTER.UNORDERED, f"{ROUTERS}::{router}", DEFAULT, "cpu", ["numerics"])
    assert report.verdict == verdict, [f.title for f in report.findings]


@pytest.mark.parametrize(
    ("router", "verdict"),
    [
        ("groups_as_the_reference_does", "PASS"),
        ("groups_in_float64", "PASS"),
        ("keeps_one_group", "FAIL"),
        ("ignores_the_groups", "FAIL"),
    ],
)
def test_a_router_that_picks_groups_first_is_judged_through_both_choices(router: str, verdict: str):
    """Where two groups' sums tie at the reference's precision, the group rounding favours
    decides which experts a token can get: the reference's own choice passes there."""
    report = audit(ROUTER.BY_GROUPS, f"{ROUTERS}::{router}", DEFAULT, "cpu", ["numerics"])
    assert report.verdict == verdict, [f.title for f in report.findings]
