"""Input domains: the draws a stated guarantee leaves, and how a problem states one."""

from pathlib import Path

import pytest
import torch

from kernelaudit.errors import CaseUnavailable, ProblemError, UsageError
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.layouts import expand_dim
from kernelaudit.inputs.materialize import materialize
from kernelaudit.problem.domain import Domain, assuming, parse_assumption
from kernelaudit.problem.load import load_problem
from kernelaudit.problem.spec import IndexInput, MaskInput, Output, Problem, TensorInput

SIZES = (("rows", 64), ("cols", 48))


def _problem(*inputs) -> Problem:
    return Problem(
        name="domains",
        reference=lambda *args: args[0],
        axes=("rows", "cols"),
        inputs=inputs,
        outputs=(Output("y", ("rows", "cols"), dtype="x"),),
        workloads=(dict(SIZES),),
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("draw", ["normal", "large", "tiny", "heavy_tailed", "zero_rows"])
def test_positive_and_ranged_inputs_are_drawn_inside_their_domain(dtype, draw):
    problem = _problem(
        TensorInput("x", ("rows", "cols"), (dtype,), domain=Domain(positive=True)),
        TensorInput("s", ("rows", "cols"), (dtype,), domain=Domain(low=0.1, high=0.9)),
    )
    values = materialize(problem, Case(SIZES, values=(("x", draw), ("s", draw))))
    x, s = values["x"].double(), values["s"].double()
    assert bool((x > 0).all())
    assert bool((s >= 0.1).all()) and bool((s <= 0.9).all())
    if draw in ("large", "heavy_tailed"):
        # the ends of the range are drawn too
        assert float(s.min()) == pytest.approx(0.1, rel=1e-2)
        assert float(s.max()) == pytest.approx(0.9, rel=1e-2)


def test_a_mask_keeps_its_stated_minimum_in_every_row():
    problem = _problem(
        TensorInput("x", ("rows", "cols")),
        MaskInput("keep", ("rows", "cols"), domain=Domain(min_kept=3)),
    )
    keep = materialize(problem, Case(SIZES, values=(("keep", "random"),)))["keep"]
    assert int(keep.sum(dim=-1).min()) >= 3


def test_a_stated_domain_reads_back_from_its_description():
    stated = Domain(finite=True, positive=True, low=0.5, high=4.0, contiguous=True)
    assert parse_assumption(f"x={stated.describe()}") == ("x", stated)
    problem = assuming(_problem(TensorInput("x", ("rows", "cols"))), [("x", stated.describe())])
    assert problem.domain("x") == stated
    assert problem.assumed == (("x", stated.describe()),)


def test_a_problem_file_with_a_domain_that_cannot_hold_names_the_field(tmp_path: Path):
    file = tmp_path / "bad_domain.py"
    file.write_text(
        "from kernelaudit import Domain, Output, Problem, TensorInput\n"
        "problem = Problem(\n"
        "    name='bad', reference=lambda x: x, axes=('n',),\n"
        "    inputs=(TensorInput('x', ('n',), domain=Domain(low=2.0, high=1.0)),),\n"
        "    outputs=(Output('y', ('n',), dtype='x'),), workloads=({'n': 4},),\n"
        ")\n"
    )
    with pytest.raises(ProblemError) as raised:
        load_problem(file)
    assert "domain" in str(raised.value) and "low 2.0 is above high 1.0" in str(raised.value)


@pytest.mark.parametrize("draw", ["uniform", "sorted", "boundary"])
def test_ids_declared_sorted_and_unique_are_drawn_so(draw):
    problem = _problem(
        TensorInput("x", ("rows", "cols")),
        IndexInput("ids", ("rows",), bound="cols", domain=Domain(unique_ids=True)),
        IndexInput("seg", ("rows",), bound="cols", domain=Domain(sorted_ids=True)),
    )
    sizes = (("rows", 40), ("cols", 48))
    values = materialize(problem, Case(sizes, values=(("ids", draw), ("seg", draw))))
    ids, seg = values["ids"], values["seg"]
    assert ids.unique().numel() == ids.numel() and bool(((ids >= 0) & (ids < 48)).all())
    assert bool((seg[1:] >= seg[:-1]).all())
    if draw == "boundary":  # the draw's own character kept: the first and last rows named
        assert {0, 47} <= set(ids.tolist())
    # more ids than rows cannot be unique: no such case, and the report says why
    with pytest.raises(CaseUnavailable, match="40 ids declared unique cannot index 8 rows"):
        materialize(problem, Case((("rows", 40), ("cols", 8))))
    # the draws made to repeat ids are refused for unique ones
    with pytest.raises(UsageError, match="declared unique, and distribution 'zipf'"):
        materialize(problem, Case(sizes, values=(("ids", "zipf"),)))


def test_index_guarantees_read_back_and_belong_to_index_inputs():
    stated = Domain(sorted_ids=True, unique_ids=True)
    assert stated.describe() == "sorted,unique"
    assert parse_assumption("ids=sorted,unique") == ("ids", stated)
    with pytest.raises(UsageError, match="sorted_ids describes index inputs"):
        assuming(_problem(TensorInput("x", ("rows", "cols"))), [("x", "sorted")])


def _lengths_problem(positions: Domain, lengths_shape=("rows",)) -> Problem:
    return _problem(
        TensorInput("x", ("rows", "cols")),
        IndexInput("lengths", lengths_shape, bound="cols"),
        IndexInput("positions", ("rows", "cols"), bound="cols", domain=positions),
    )


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "expanded", "broadcast"])
@pytest.mark.parametrize("draw", ["uniform", "zipf", "hot", "boundary", "sorted"])
def test_ids_held_below_another_input_stay_below_it_in_every_row(draw, layout):
    problem = _lengths_problem(Domain(below="lengths"))
    case = Case(SIZES, values=(("positions", draw), ("lengths", "boundary")))
    case = Case(SIZES, values=case.values, layouts=(("positions", layout),))
    values = materialize(problem, case)
    lengths, positions = values["lengths"], values["positions"]
    # the boundary draw of the lengths names 0 for some rows: raised to 1, as a row with
    # positions has at least one its callers can pass
    assert int(lengths.min()) >= 1
    assert bool((positions >= 0).all()) and bool((positions < lengths[:, None]).all())
    # what a stride-0 view shows is what was drawn: the values repeat along it
    if layout == "broadcast":
        assert bool((positions == positions.reshape(-1)[0]).all())
    d = expand_dim(tuple(positions.shape)) if layout == "expanded" else None
    if d is not None:
        assert torch.equal(positions, positions.narrow(d, 0, 1).expand_as(positions))
    unheld = materialize(_lengths_problem(Domain()), case)["positions"]
    assert bool((unheld >= lengths[:, None]).any())  # without the guarantee, past the length
    if draw == "boundary" and layout == "contiguous":
        # a row's last id is still its last valid one
        long = lengths >= 2
        assert bool((positions[long] == (lengths[long, None] - 1)).any(dim=-1).all())


def test_a_limit_names_an_earlier_index_input_over_the_leading_axes():
    stated = Domain(below="lengths")
    assert stated.describe() == "below:lengths"
    assert parse_assumption("positions=below:lengths") == ("positions", stated)
    problem = assuming(_lengths_problem(Domain()), [("positions", "below:lengths")])
    assert problem.domain("positions") == stated
    with pytest.raises(UsageError, match="no index input 'lengths' is declared before"):
        assuming(
            _problem(
                TensorInput("x", ("rows", "cols")),
                IndexInput("positions", ("rows", "cols"), bound="cols"),
                IndexInput("lengths", ("rows",), bound="cols"),
            ),
            [("positions", "below:lengths")],
        )
    with pytest.raises(UsageError, match="does not start the shape"):
        assuming(_lengths_problem(Domain(), ("cols",)), [("positions", "below:lengths")])
    with pytest.raises(UsageError, match="keeps neither a global order nor distinct ids"):
        assuming(_lengths_problem(Domain()), [("positions", "below:lengths,sorted")])
    with pytest.raises(UsageError, match="below describes index inputs"):
        assuming(_lengths_problem(Domain()), [("x", "below:lengths")])
    # labels taken at another input's argmax are not made for ids held below a third
    assert not stated.admits("argmax") and stated.admits("zipf")
