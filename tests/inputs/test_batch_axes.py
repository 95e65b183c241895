"""Batch axes and row-restricted cases: which axes a problem's rows are independent along,
inferred from the reference or declared, and cases cut to a few rows of such an axis."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kernelaudit import (
    Axis,
    Contract,
    IndexInput,
    Output,
    Problem,
    ScalarInput,
    TensorInput,
)
from kernelaudit.errors import ProblemError, UsageError
from kernelaudit.inputs.batch import batch_axes, infer_batch_axes, inference_skipped
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import materialize
from kernelaudit.problem.validate import validate


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def _embedding(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return weight[ids]


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def _running_sum(x: torch.Tensor) -> torch.Tensor:
    # each row sums every row before it: its first row alone is right, its last is not
    return x.cumsum(dim=0)


def _rmsnorm(x: torch.Tensor, weight: torch.Tensor, hidden: int) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).sum(dim=-1, keepdim=True) / hidden) * weight


MATMUL = Problem(
    name="matmul",
    reference=_matmul,
    axes=("m", "n", "k"),
    inputs=(TensorInput("a", ("m", "k")), TensorInput("b", ("k", "n"), role="weight")),
    outputs=(Output("c", ("m", "n")),),
    workloads=({"m": 64, "n": 32, "k": 48},),
)

EMBEDDING = Problem(
    name="embedding",
    reference=_embedding,
    axes=("tokens", "vocab", "hidden"),
    inputs=(
        TensorInput("weight", ("vocab", "hidden"), role="weight"),
        IndexInput("ids", ("tokens",), bound="vocab"),
    ),
    outputs=(Output("out", ("tokens", "hidden")),),
    workloads=({"tokens": 128, "vocab": 50, "hidden": 16},),
)

SOFTMAX = Problem(
    name="softmax",
    reference=_softmax,
    axes=("rows", "cols"),
    inputs=(TensorInput("x", ("rows", "cols")),),
    outputs=(Output("y", ("rows", "cols")),),
    workloads=({"rows": 32, "cols": 64},),
)

RMSNORM = Problem(
    name="rmsnorm",
    reference=_rmsnorm,
    axes=("rows", "hidden"),
    inputs=(
        TensorInput("x", ("rows", "hidden"), dtypes=(torch.float16,)),
        TensorInput("weight", ("hidden",), dtypes=(torch.float16,), role="weight"),
        ScalarInput("hidden", "hidden"),
    ),
    outputs=(Output("y", ("rows", "hidden"), dtype="x"),),
    workloads=({"rows": 10, "hidden": 12},),
)


@pytest.mark.parametrize(
    ("problem", "axes"),
    [
        (MATMUL, ("m", "n")),  # k is summed over
        (EMBEDDING, ("tokens", "hidden")),  # ids point into vocab
        (SOFTMAX, ("rows",)),  # every column's result depends on the others
        (RMSNORM, ("rows",)),
        (replace(SOFTMAX, name="running_sum", reference=_running_sum), ("cols",)),
    ],
    ids=["matmul", "embedding", "softmax", "rmsnorm", "running-sum"],
)
def test_batch_axes_are_inferred_from_the_reference(
    problem: Problem, axes: tuple[str, ...]
) -> None:
    assert infer_batch_axes(problem) == axes


def test_declared_batch_axes_win_over_inference_and_an_empty_declaration_turns_them_off() -> None:
    assert batch_axes(replace(MATMUL, contract=Contract(batch_axes=["n"]))) == ("n",)
    assert batch_axes(replace(MATMUL, contract=Contract(batch_axes=()))) == ()


def test_a_reference_that_rejects_small_sizes_is_tried_at_the_first_workload() -> None:
    def needs_wide_rows(x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] < 32:
            raise ValueError("at least 32 columns")
        return torch.softmax(x, dim=-1)

    assert infer_batch_axes(replace(SOFTMAX, reference=needs_wide_rows)) == ("rows",)


def test_a_problem_too_large_to_try_on_the_host_is_not_inferred_and_says_why() -> None:
    calls = []

    def table_lookup(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape)
        return x * table[: x.shape[1]]

    # a table of every position: its smallest case already holds 2^28 elements
    huge = Problem(
        name="positions",
        reference=table_lookup,
        axes=("rows", "cols", Axis("positions", min=1 << 28)),
        inputs=(
            TensorInput("x", ("rows", "cols")),
            TensorInput("table", ("positions",), role="weight"),
        ),
        outputs=(Output("y", ("rows", "cols")),),
        workloads=({"rows": 8, "cols": 16, "positions": 1 << 28},),
    )
    assert infer_batch_axes(huge) == ()
    assert not calls  # the reference never ran
    assert "268,435,4" in inference_skipped(huge) and "Contract(batch_axes" in inference_skipped(
        huge
    )
    declared = replace(huge, contract=Contract(batch_axes=("rows",)))
    assert batch_axes(declared) == ("rows",) and inference_skipped(declared) == ""
    assert inference_skipped(SOFTMAX) == ""


@pytest.mark.parametrize(
    ("contract", "field", "words"),
    [
        (Contract(batch_axes=("k",)), "contract.batch_axes", "'c' does not have it"),
        (Contract(batch_axes=("rows",)), "contract.batch_axes", "not a declared axis"),
        (
            Contract(batch_invariant=True, deterministic=False),
            "contract.batch_invariant",
            "cannot promise",
        ),
        (Contract(batch_invariant="yes"), "contract.batch_invariant", "not True or False"),
    ],
)
def test_contract_batch_fields_are_validated(contract: Contract, field: str, words: str) -> None:
    with pytest.raises(ProblemError) as raised:
        validate(replace(MATMUL, contract=contract))
    assert raised.value.field == field
    assert words in str(raised.value)


def test_an_axis_of_one_fixed_size_is_no_batch_axis_and_costs_no_reference_run() -> None:
    calls = []

    def projection(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape)
        return x @ w

    # a layer whose width is a constant of the model: a row of it alone is no size it takes
    fixed = Problem(
        name="projection",
        reference=projection,
        axes=(Axis("hidden", min=64, max=64), Axis("out", min=32, max=32)),
        inputs=(TensorInput("x", ("hidden",)), TensorInput("w", ("hidden", "out"), role="weight")),
        outputs=(Output("y", ("out",)),),
        workloads=({"hidden": 64, "out": 32},),
    )
    assert infer_batch_axes(fixed) == ()
    assert not calls
    with pytest.raises(ProblemError, match="'out' cannot be a batch axis: its size is fixed at 32"):
        validate(replace(fixed, contract=Contract(batch_axes=("out",))))


def test_an_index_bound_cannot_be_declared_a_batch_axis() -> None:
    with pytest.raises(ProblemError, match="index input 'ids' points into it"):
        validate(replace(EMBEDDING, contract=Contract(batch_axes=("vocab",))))


def test_rows_cut_every_input_with_the_axis_to_the_same_values_as_the_whole() -> None:
    whole = Case((("rows", 10), ("hidden", 12)), seed=3)
    cut = whole.with_rows("rows", 7, 9, "two rows")
    full, rows = materialize(RMSNORM, whole), materialize(RMSNORM, cut)
    x = rows["x"]
    assert isinstance(x, torch.Tensor) and x.is_contiguous()
    assert torch.equal(x, full["x"][7:9])  # type: ignore[index]
    assert torch.equal(rows["weight"], full["weight"])  # type: ignore[arg-type]
    assert cut.size_map() == {"rows": 2, "hidden": 12}
    # an argument that is the cut axis's size follows the cut; one of another axis does not
    cut_hidden = whole.with_rows("hidden", 0, 5)
    assert materialize(RMSNORM, cut_hidden)["hidden"] == 5
    assert materialize(RMSNORM, cut)["hidden"] == 12


def test_a_window_past_a_shrunk_axis_slides_back_to_its_end() -> None:
    cut = Case((("rows", 3), ("hidden", 12))).with_rows("rows", 7, 8)
    assert cut.row_window() == ("rows", 2, 3)
    assert torch.equal(
        materialize(RMSNORM, cut)["x"],  # type: ignore[arg-type]
        materialize(RMSNORM, replace(cut, rows=None))["x"][2:3],  # type: ignore[index]
    )


def test_rows_survive_json_and_show_in_the_description() -> None:
    cut = Case((("rows", 10), ("hidden", 12)), label="w").with_rows("rows", 9, 10)
    assert Case.from_json(cut.to_json()) == cut
    assert "rows rows[9:10] alone" in cut.describe()
    plain = Case((("rows", 10), ("hidden", 12)))
    assert "rows" not in plain.to_json()
    assert Case.from_json(plain.to_json()) == plain


def test_rows_along_an_axis_an_index_input_points_into_are_refused() -> None:
    case = Case((("tokens", 8), ("vocab", 50), ("hidden", 16))).with_rows("vocab", 0, 1)
    with pytest.raises(UsageError, match="index input 'ids' points into"):
        materialize(EMBEDDING, case)


def test_rows_cut_index_inputs_along_their_own_axis() -> None:
    whole = Case((("tokens", 8), ("vocab", 50), ("hidden", 16)))
    full = materialize(EMBEDDING, whole)
    cut = materialize(EMBEDDING, whole.with_rows("tokens", 5, 6))
    assert torch.equal(cut["ids"], full["ids"][5:6])  # type: ignore[arg-type,index]
    assert torch.equal(cut["weight"], full["weight"])  # type: ignore[arg-type]


def test_the_small_trial_case_keeps_to_the_axes_declared_constraints() -> None:
    def whole_vectors(x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] % 8:
            raise ValueError("cols must be a multiple of the vector width 8")
        return torch.softmax(x, dim=-1)

    problem = replace(
        SOFTMAX,
        reference=whole_vectors,
        axes=(Axis("rows"), Axis("cols", multiple_of=8)),
        # too large to fall back on: only a small case that keeps to multiple_of can tell
        workloads=({"rows": 1024, "cols": 2048},),
    )
    assert infer_batch_axes(problem) == ("rows",)


def _summed_by_id(values: torch.Tensor, ids: torch.Tensor, vocab: int) -> torch.Tensor:
    return torch.zeros(vocab, dtype=values.dtype).index_add_(0, ids, values)


def _share_by_id(values: torch.Tensor, ids: torch.Tensor, vocab: int) -> torch.Tensor:
    # each id's share of the whole: every row depends on every element
    return _summed_by_id(values, ids, vocab) / values.sum()


def _by_id(reference: object) -> Problem:
    return Problem(
        name="by_id",
        reference=reference,  # type: ignore[arg-type]
        axes=(Axis("n"), Axis("vocab")),
        inputs=(
            TensorInput("values", ("n",), dtypes=(torch.float32,)),
            IndexInput("ids", ("n",), bound="vocab"),
            ScalarInput("vocab", value="vocab"),
        ),
        outputs=(Output("rows", ("vocab",)),),
        workloads=({"n": 64, "vocab": 16},),
    )


def test_an_index_input_keys_the_rows_its_elements_are_summed_into() -> None:
    from kernelaudit.inputs.batch import Keyed, keyed_rows

    assert keyed_rows(_by_id(_summed_by_id)) == (Keyed("ids", "n", "vocab"),)
    assert keyed_rows(_by_id(_share_by_id)) == ()
    assert batch_axes(_by_id(_summed_by_id)) == ()
