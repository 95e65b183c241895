"""A kept draw is copied to the device once: every case that takes it gets the same values as
a copy from the host would give, and nothing a case or a reference writes reaches another."""

import pytest
import torch

from kernelaudit.inputs import materialize as materialize_module
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import materialize
from kernelaudit.inputs.reuse import SMALLEST, Draws
from kernelaudit.oracle import resident as resident_module
from kernelaudit.oracle import truth as truth_module
from kernelaudit.oracle.resident import Resident
from kernelaudit.oracle.truth import expected
from kernelaudit.problem.spec import Contract, Output, Problem, TensorInput

CPU = torch.device("cpu")


def _kept(draws: Draws, key: str, fill: float = 1.0) -> torch.Tensor:
    return draws.get(key, lambda: torch.full((SMALLEST,), fill))


def test_cases_given_one_draw_share_one_held_copy_and_others_get_none() -> None:
    draws = Draws(1 << 30)
    held = Resident(draws, most_bytes=1 << 30)
    one, two = _kept(draws, "w"), _kept(draws, "w")
    first = held.get(one, torch.float32, CPU)
    assert first is not None and torch.equal(first, one)
    assert held.get(two, torch.float32, CPU) is first  # made once
    as_half = held.get(two, torch.float16, CPU)  # another dtype: a copy of its own
    assert as_half is not None and as_half.dtype == torch.float16
    assert held.get(torch.ones(SMALLEST), torch.float32, CPU) is None  # not a kept draw
    with held.paused():
        assert held.get(one, torch.float32, CPU) is None
    assert held.get(one, torch.float32, CPU) is first
    two.add_(1.0)  # written to: its values are no longer the draw's
    assert held.get(two, torch.float32, CPU) is None
    again = _kept(draws, "w")  # drawn afresh for the next case: the held copy is its values
    assert torch.equal(again, first) and held.get(again, torch.float32, CPU) is first


def test_what_is_held_stays_within_its_bytes_least_recently_used_dropped_first() -> None:
    draws = Draws(1 << 30)
    one = SMALLEST * 4  # a float32 draw's bytes
    held = Resident(draws, most_bytes=2 * one)
    a, b, c = (_kept(draws, name, i) for i, name in enumerate("abc"))
    held_a = held.get(a, torch.float32, CPU)
    held.get(b, torch.float32, CPU)
    assert held.get(a, torch.float32, CPU) is held_a  # now the most recently used
    held.get(c, torch.float32, CPU)  # past the bytes: "b" goes
    assert held.held_bytes() == 2 * one
    assert held.get(a, torch.float32, CPU) is held_a
    assert held.get(torch.ones(3 * SMALLEST), torch.float32, CPU) is None
    too_large = draws.get("d", lambda: torch.ones(3 * SMALLEST))
    assert held.get(too_large, torch.float32, CPU) is None  # larger than all it may hold
    held.clear()
    assert held.held_bytes() == 0


def test_what_is_made_of_a_draw_is_made_once_and_held_beside_it() -> None:
    draws = Draws(1 << 30)
    held = Resident(draws, most_bytes=1 << 30)
    made: list[int] = []

    def doubled(native: torch.Tensor) -> torch.Tensor:
        made.append(1)
        return native * 2

    one, two = _kept(draws, "w", 3.0), _kept(draws, "w", 3.0)
    first = held.get(one, torch.float32, CPU, ("doubled", doubled))
    assert first is not None and bool((first == 6.0).all())
    assert held.get(two, torch.float32, CPU, ("doubled", doubled)) is first
    assert made == [1]
    native = held.get(two, torch.float32, CPU)  # the draw's own copy is held too, unchanged
    assert native is not None and bool((native == 3.0).all())
    assert held.held_bytes() == 2 * SMALLEST * 4


def test_room_is_made_before_a_copy_is_made_never_after() -> None:
    draws = Draws(1 << 30)
    one = SMALLEST * 4  # a float32 draw's bytes
    held = Resident(draws, most_bytes=2 * one)
    a, b, c = (_kept(draws, name, i) for i, name in enumerate("abc"))
    held.get(a, torch.float32, CPU)
    held.get(b, torch.float32, CPU)
    beside: list[int] = []

    def doubled(native: torch.Tensor) -> torch.Tensor:
        beside.append(held.held_bytes())  # what the device holds while the copy is made
        return native * 2

    made = held.get(c, torch.float32, CPU, ("doubled", doubled))
    assert made is not None and bool((made == 4.0).all())
    # c's own copy was made after "a" went, its doubled copy after "b" went: never more
    # than the bytes allowed with the copy being made
    assert beside == [one]
    assert held.held_bytes() == 2 * one


def test_out_of_device_memory_with_copies_held_is_computed_again_without_them() -> None:
    draws = Draws(1 << 30)
    held = Resident(draws, most_bytes=1 << 30)
    weight = _kept(draws, "w")
    tries: list[bool] = []

    def truth() -> str:
        copy = held.get(weight, torch.float32, CPU)
        tries.append(copy is not None)
        if copy is not None:
            raise torch.cuda.OutOfMemoryError("no room beside the held copies")
        return "computed"

    assert held.retried_without(truth) == "computed"
    assert tries == [True, False] and held.held_bytes() == 0
    assert held.get(weight, torch.float32, CPU) is not None  # held again afterwards

    def never_fits() -> str:
        raise torch.cuda.OutOfMemoryError("no room at all")

    held.clear()
    with pytest.raises(torch.cuda.OutOfMemoryError):
        held.retried_without(never_fits)  # nothing held: nothing to give back


# a layer whose reference writes into its weight: the contract says it may
def _writes_into_its_weight(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = x @ w
    w.mul_(0.5)
    return y


LAYER = Problem(
    name="layer",
    reference=_writes_into_its_weight,
    axes=("tokens", "hidden", "out"),
    inputs=(
        TensorInput("x", ("tokens", "hidden")),
        TensorInput("w", ("hidden", "out"), role="weight"),
    ),
    outputs=(Output("y", ("tokens", "out"), "x"),),
    workloads=({"tokens": 8, "hidden": 1024, "out": 1024},),
    contract=Contract(mutates=("w",)),
)


def _case(tokens: int, **values: str) -> Case:
    sizes = (("tokens", tokens), ("hidden", 1024), ("out", 1024))
    return Case(sizes, 0, tuple(sorted(values.items())), (), 0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cases_sharing_a_weight_on_a_gpu_judge_as_copies_from_the_host_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    draws = Draws(1 << 30)
    held = Resident(draws)
    monkeypatch.setattr(materialize_module, "DRAWS", draws)
    monkeypatch.setattr(truth_module, "RESIDENT", held)
    config = {"x": torch.float32, "w": torch.float32}
    cases = [_case(8), _case(17), _case(8, x="large")]
    through_device = [expected(LAYER, materialize(LAYER, c), config, "cuda") for c in cases]
    assert held.held_bytes() == 1024 * 1024 * 4  # the weight, once, though written to twice
    monkeypatch.setattr(resident_module, "SHARE", 1 << 62)  # nothing fits: all from the host
    held.clear()
    from_host = [expected(LAYER, materialize(LAYER, c), config, "cuda") for c in cases]
    assert held.held_bytes() == 0
    for a, b in zip(through_device, from_host, strict=True):
        for x, y in zip((*a.truth, *a.baseline), (*b.truth, *b.baseline), strict=True):
            assert torch.equal(x, y)
        nudged_a, nudged_b = a.nudged(), b.nudged()
        assert nudged_a is not None and nudged_b is not None
        for m, n in zip(nudged_a, nudged_b, strict=True):
            assert torch.equal(m.truth, n.truth) and torch.equal(m.baseline, n.baseline)
