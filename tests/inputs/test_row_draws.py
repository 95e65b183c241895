"""The draws of whole rows a model's real inputs have: all-zero rows, rows of -inf, peaked rows,
and ids at each row's argmax."""

import pytest
import torch

from kernelaudit.errors import UsageError
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.distributions import draw_float, peak
from kernelaudit.inputs.indices import draw_index
from kernelaudit.inputs.materialize import argmax_source, distributions_for, materialize
from kernelaudit.problem.spec import IndexInput, Output, Problem, TensorInput

DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def draw(name: str, shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return draw_float(name, shape, dtype, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("name", "special"), [("zero_rows", 0.0), ("neg_inf_rows", -torch.inf)])
def test_a_share_of_whole_rows_takes_the_value_and_the_rest_stay_normal(name, special, dtype):
    values = draw(name, (4, 512, 64), dtype).double().reshape(-1, 64)
    whole = (values == special).all(dim=1)
    untouched = torch.isfinite(values).all(dim=1) & (values != 0).any(dim=1)
    assert bool((whole | untouched).all())  # a row is changed whole or not at all
    assert 0.2 < float(whole.double().mean()) < 0.3
    assert float(values[untouched].std()) == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("name", ["zero_rows", "neg_inf_rows"])
@pytest.mark.parametrize("seed", range(8))
def test_at_least_one_row_changes_however_few_there_are(name, seed):
    special = 0.0 if name == "zero_rows" else -torch.inf
    values = draw(name, (2, 16), torch.float32, seed)
    assert bool((values == special).all(dim=1).any())
    # a vector is one row: it changes whole
    assert bool((draw(name, (16,), torch.float32, seed) == special).all())


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_peaked_row_has_one_value_standing_far_above_the_rest(dtype):
    values = draw("peaked", (300, 128), dtype).double()
    top, at = values.topk(2, dim=-1)
    assert torch.equal(top[:, 0], torch.full((300,), peak(128)).to(dtype).double())
    assert bool((top[:, 0] - top[:, 1] > 4).all())
    # the peaks sit at arbitrary positions, not in one column
    assert at[:, 0].unique().numel() > 50
    # a softmax of such a row is nearly one-hot, whatever the row's length
    for width in (16, 128, 4096):
        rows = draw("peaked", (200, width), torch.float64)
        off_peak = 1 - torch.softmax(rows, dim=-1).amax(dim=-1)
        assert 0.005 < float(off_peak.mean()) < 0.02


def test_argmax_ids_come_from_their_rows_and_only_through_materialize():
    problem = _cross_entropy()
    case = Case(
        sizes=(("rows", 40), ("vocab", 300)),
        values=(("logits", "peaked"), ("target", "argmax")),
        seed=3,
    )
    values = materialize(problem, case)
    logits, target = values["logits"], values["target"]
    assert target.dtype == torch.int32 and target.shape == (40,)
    assert torch.equal(target.long(), logits.double().argmax(dim=-1))
    assert torch.equal(materialize(problem, case)["target"], target)  # same case, same ids
    with pytest.raises(UsageError, match="another input"):
        draw_index("argmax", (4,), 10, torch.int64, torch.Generator())


def test_argmax_is_offered_only_for_ids_with_one_input_shaped_to_match():
    problem = _cross_entropy()
    assert argmax_source(problem, problem.input("target")) == problem.input("logits")
    assert "argmax" in distributions_for(problem.input("target"), problem)
    unpaired = Problem(
        name="gather_rows",
        reference=lambda table, ids: table[ids],
        axes=("rows", "vocab", "hidden"),
        inputs=(
            TensorInput("table", ("vocab", "hidden")),
            IndexInput("ids", ("rows",), bound="vocab"),
        ),
        outputs=(Output("y", ("rows", "hidden"), dtype="table"),),
        workloads=({"rows": 4, "vocab": 8, "hidden": 2},),
    )
    assert "argmax" not in distributions_for(unpaired.input("ids"), unpaired)
    case = Case(sizes=(("rows", 4), ("vocab", 8), ("hidden", 2)), values=(("ids", "argmax"),))
    with pytest.raises(UsageError, match="cannot take distribution 'argmax'"):
        materialize(unpaired, case)


def _cross_entropy() -> Problem:
    return Problem(
        name="cross_entropy",
        reference=lambda logits, target: torch.nn.functional.cross_entropy(
            logits, target.long(), reduction="none"
        ),
        axes=("rows", "vocab"),
        inputs=(
            TensorInput("logits", ("rows", "vocab")),
            IndexInput("target", ("rows",), bound="vocab", dtype=torch.int32),
        ),
        outputs=(Output("loss", ("rows",), dtype="logits"),),
        workloads=({"rows": 8, "vocab": 32},),
    )
