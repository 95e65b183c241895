import pytest
import torch

from kernelaudit.errors import UsageError
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.distributions import FLOAT_DISTRIBUTIONS
from kernelaudit.inputs.indices import INDEX_DISTRIBUTIONS
from kernelaudit.inputs.layouts import present
from kernelaudit.inputs.masks import MASK_DISTRIBUTIONS
from kernelaudit.inputs.materialize import (
    default_distribution,
    distributions_for,
    input_generator,
    materialize,
)
from kernelaudit.problem.spec import (
    Axis,
    IndexInput,
    MaskInput,
    Output,
    Problem,
    ScalarInput,
    TensorInput,
)

PROBLEM = Problem(
    name="embed_norm",
    reference=lambda *args: args[0],
    axes=(Axis("tokens"), Axis("hidden"), Axis("vocab")),
    inputs=(
        TensorInput("x", ("tokens", "hidden"), (torch.float32, torch.bfloat16)),
        TensorInput("w", ("hidden",), (torch.float32, torch.bfloat16), role="weight"),
        TensorInput("table", ("vocab", "hidden"), (torch.float32,)),
        IndexInput("ids", ("tokens",), bound="vocab", dtype=torch.int32),
        MaskInput("keep", ("tokens", "tokens")),
        MaskInput("bias", (2, "tokens", "tokens"), kind="additive"),
        ScalarInput("eps", 1e-6),
        ScalarInput("n", "hidden"),
    ),
    outputs=(Output("y", ("tokens", "hidden"), "x"),),
    workloads=({"tokens": 24, "hidden": 40, "vocab": 100},),
)

CASE = Case(sizes=(("tokens", 24), ("hidden", 40), ("vocab", 100)), seed=7)


def test_every_input_in_declaration_order_with_its_shape_and_dtype() -> None:
    values = materialize(PROBLEM, CASE)
    assert list(values) == ["x", "w", "table", "ids", "keep", "bias", "eps", "n"]
    expected = {
        "x": ((24, 40), torch.float32),
        "w": ((40,), torch.float32),
        "table": ((100, 40), torch.float32),
        "ids": ((24,), torch.int32),
        "keep": ((24, 24), torch.bool),
        "bias": ((2, 24, 24), torch.float32),
    }
    for name, (shape, dtype) in expected.items():
        tensor = values[name]
        assert isinstance(tensor, torch.Tensor)
        assert tensor.shape == shape and tensor.dtype == dtype
        assert tensor.device.type == "cpu" and tensor.is_contiguous()
    assert values["eps"] == 1e-6 and values["n"] == 40


def test_second_dtype_configuration() -> None:
    values = materialize(PROBLEM, Case(CASE.sizes, dtype_config=1, seed=7))
    assert values["x"].dtype == torch.bfloat16 and values["w"].dtype == torch.bfloat16
    assert values["table"].dtype == torch.float32


def test_role_defaults_show_in_the_values() -> None:
    values = materialize(PROBLEM, CASE)
    w = values["w"]
    assert not torch.equal(w, torch.ones_like(w)) and abs(w.mean().item() - 1) < 0.2
    ids = values["ids"]
    assert ids.min() >= 0 and ids.max() < 100
    assert values["keep"].any(dim=-1).all()
    assert set(values["bias"].unique().tolist()) == {0.0, float("-inf")}


def _same(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a
    )


def test_same_case_same_values_and_another_seed_changes_them() -> None:
    assert _same(materialize(PROBLEM, CASE), materialize(PROBLEM, CASE))
    other = materialize(PROBLEM, Case(CASE.sizes, seed=8))
    assert not torch.equal(other["x"], materialize(PROBLEM, CASE)["x"])


def test_changing_one_inputs_distribution_leaves_the_others_alone() -> None:
    before = materialize(PROBLEM, CASE)
    after = materialize(PROBLEM, CASE.with_value("x", "small_integers").with_value("ids", "zipf"))
    assert not torch.equal(before["x"], after["x"]) and not torch.equal(before["ids"], after["ids"])
    for name in ("w", "table", "keep", "bias"):
        assert torch.equal(before[name], after[name])
    x = after["x"]
    assert torch.equal(x, x.round()) and x.abs().max() <= 4


def test_generators_depend_on_seed_and_name_only() -> None:
    def first(seed: int, name: str) -> float:
        return torch.rand((), generator=input_generator(seed, name)).item()

    assert first(1, "x") == first(1, "x")
    assert len({first(1, "x"), first(1, "y"), first(2, "x"), first(1 + 2**32, "x")}) == 4


def test_expanded_inputs_are_constant_where_the_layout_broadcasts() -> None:
    case = CASE.with_layout("x", "expanded").with_layout("keep", "expanded")
    values = materialize(PROBLEM, case)
    x = values["x"]
    assert x.shape == (24, 40) and x.is_contiguous()
    assert torch.equal(x, x[:1].expand_as(x))
    assert torch.equal(present(x, "expanded"), x)
    assert torch.equal(values["w"], materialize(PROBLEM, CASE)["w"])


def test_distribution_that_does_not_fit_the_input_names_the_valid_ones() -> None:
    with pytest.raises(UsageError, match=r"input 'ids' cannot take distribution 'normal'.*zipf"):
        materialize(PROBLEM, CASE.with_value("ids", "normal"))
    with pytest.raises(UsageError, match=r"input 'x' cannot take distribution 'zipf'"):
        materialize(PROBLEM, CASE.with_value("x", "zipf"))


def test_case_naming_an_undeclared_input_is_refused() -> None:
    with pytest.raises(UsageError, match=r"\['y'\]"):
        materialize(PROBLEM, CASE.with_value("y", "normal"))
    with pytest.raises(UsageError, match="no distribution"):
        materialize(PROBLEM, CASE.with_value("eps", "normal"))


def test_missing_axis_and_bad_dtype_config_are_explained() -> None:
    with pytest.raises(UsageError, match="axis 'vocab'"):
        materialize(PROBLEM, Case(sizes=(("tokens", 4), ("hidden", 8))))
    with pytest.raises(UsageError, match="2 dtype configuration"):
        materialize(PROBLEM, Case(CASE.sizes, dtype_config=2))


def test_distributions_and_defaults_per_input_kind() -> None:
    assert distributions_for(PROBLEM.input("x")) == tuple(FLOAT_DISTRIBUTIONS)
    assert distributions_for(PROBLEM.input("ids")) == tuple(INDEX_DISTRIBUTIONS)
    assert distributions_for(PROBLEM.input("keep")) == tuple(MASK_DISTRIBUTIONS)
    assert distributions_for(PROBLEM.input("eps")) == ()
    assert default_distribution(PROBLEM.input("x")) == "normal"
    assert default_distribution(PROBLEM.input("w")) == "weight"
    assert default_distribution(PROBLEM.input("ids")) == "uniform"
    assert default_distribution(PROBLEM.input("keep")) == "random"
