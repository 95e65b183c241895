"""Large draws are made once and handed out again: the values are those drawing again gives,
and a draw something wrote to is drawn afresh for the next case."""

from dataclasses import replace

import pytest
import torch

from kernelaudit.inputs import materialize as materialize_module
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import materialize
from kernelaudit.inputs.reuse import SMALLEST, Draws
from kernelaudit.problem.spec import Output, Problem, Sampler, TensorInput

# a layer's weight (its shape fixed by the model) and activations along a batch axis
LAYER = Problem(
    name="layer",
    reference=lambda x, w: x @ w,
    axes=("tokens", "hidden", "out"),
    inputs=(
        TensorInput("x", ("tokens", "hidden")),
        TensorInput("w", ("hidden", "out"), role="weight"),
    ),
    outputs=(Output("y", ("tokens", "out"), "x"),),
    workloads=({"tokens": 8, "hidden": 1024, "out": 1024},),
)


def _case(tokens: int, seed: int = 0, **values: str) -> Case:
    sizes = (("tokens", tokens), ("hidden", 1024), ("out", 1024))
    return Case(sizes, 0, tuple(sorted(values.items())), (), seed)


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> Draws:
    draws = Draws(1 << 30)
    monkeypatch.setattr(materialize_module, "DRAWS", draws)
    return draws


def test_a_weight_drawn_again_is_the_same_values_given_without_a_copy(
    kept: Draws, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = materialize(LAYER, _case(8))
    assert len(kept) == 1  # the weight (2^20 elements); the activations are small
    again = materialize(LAYER, _case(17))  # another size of the batch axis, the same weight
    assert again["w"] is first["w"]  # no copy of 4 MB per case
    monkeypatch.setattr(materialize_module, "DRAWS", Draws(0))  # nothing kept: drawn afresh
    fresh = materialize(LAYER, _case(17))
    assert torch.equal(again["w"], fresh["w"]) and bool(again["w"].abs().sum() > 0)
    assert torch.equal(again["x"], fresh["x"])


def test_a_kept_draw_written_to_is_drawn_afresh_for_the_next_case(
    kept: Draws, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = materialize(LAYER, _case(8))
    first["w"].zero_()  # nothing should write to what it is given; should anything do so
    again = materialize(LAYER, _case(17))  # the next case still gets the draw's values
    assert again["w"] is not first["w"] and len(kept) == 1
    monkeypatch.setattr(materialize_module, "DRAWS", Draws(0))
    fresh = materialize(LAYER, _case(17))
    assert torch.equal(again["w"], fresh["w"]) and bool(again["w"].abs().sum() > 0)


def test_what_decides_the_values_decides_what_is_reused(kept: Draws) -> None:
    plain = materialize(LAYER, _case(8))["w"]
    other_seed = materialize(LAYER, _case(8, seed=1))["w"]
    large = materialize(LAYER, _case(8, w="large"))["w"]
    assert not torch.equal(plain, other_seed) and not torch.equal(plain, large)
    assert len(kept) == 3


def test_kept_draws_stay_within_their_bytes_least_recently_used_dropped_first() -> None:
    one = SMALLEST * 4  # bytes of a float32 tensor of SMALLEST elements
    draws = Draws(2 * one)
    calls: list[str] = []

    def draw(name: str):
        def made() -> torch.Tensor:
            calls.append(name)
            return torch.full((SMALLEST,), float(len(calls)))

        return made

    draws.get("a", draw("a"))
    draws.get("b", draw("b"))
    draws.get("a", draw("a"))  # kept: not drawn, and now the most recently used
    draws.get("c", draw("c"))  # past the bytes: "b" goes
    draws.get("a", draw("a"))
    draws.get("b", draw("b"))
    assert calls == ["a", "b", "c", "b"]
    # small draws and keys that cannot be hashed are drawn every time
    small = Draws(1 << 30)
    small.get("s", lambda: torch.zeros(8))
    small.get(("u", []), lambda: torch.zeros(SMALLEST))
    assert len(small) == 0


def test_a_problems_own_generator_runs_once_per_sizes_and_seed(
    kept: Draws, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int]] = []

    def get_inputs(sizes, seed):  # a benchmark's generator: structured weights, seeded
        calls.append((sizes["tokens"], seed))
        generator = torch.Generator().manual_seed(seed)
        w = torch.softmax(torch.randn(1024, 1024, generator=generator), dim=-1)
        return {"x": torch.randn(sizes["tokens"], 1024, generator=generator), "w": w}

    problem = replace(LAYER, sampler=Sampler(get_inputs, default_for=("w",)))
    materialize(problem, _case(8))
    other_values = materialize(problem, _case(8, x="large"))  # the same sizes and seed
    other_seed = materialize(problem, _case(8, seed=1))
    assert calls == [(8, 0), (8, 1)]
    made = other_values["w"].clone()
    other_values["w"].add_(1.0)  # written to: the generator runs again for the next case
    assert torch.equal(materialize(problem, _case(8))["w"], made)
    assert calls == [(8, 0), (8, 1), (8, 0)]
    monkeypatch.setattr(materialize_module, "DRAWS", Draws(0))  # nothing kept: made afresh
    fresh = materialize(problem, _case(8, x="large"))
    assert torch.equal(made, fresh["w"]) and torch.equal(other_values["x"], fresh["x"])
    assert not torch.equal(other_seed["w"], fresh["w"])
    assert calls[-1] == (8, 0) and len(calls) == 4


def test_values_by_name_are_given_only_for_the_names_taken() -> None:
    draws = Draws(1 << 30)
    made = {"mask": torch.ones(SMALLEST, dtype=torch.bool), "w": torch.randn(SMALLEST), "n": 3}
    first = draws.get("generator", lambda: dict(made), {"mask", "n"})
    assert set(first) == {"mask", "n"}
    again = draws.get("generator", lambda: pytest.fail("kept values are not made again"), {"w"})
    assert set(again) == {"w"} and torch.equal(again["w"], made["w"])
    again.clear()  # the caller's own mapping: what is kept keeps every name
    assert set(draws.get("generator", dict, None)) == {"mask", "w", "n"}


def test_a_draw_given_out_is_named_until_it_is_written_to(kept: Draws) -> None:
    first = materialize(LAYER, _case(8))
    again = materialize(LAYER, _case(17))  # another case, the same weight
    assert kept.origin(first["w"]) is not None
    assert kept.origin(first["w"]) == kept.origin(again["w"])
    assert kept.origin(first["x"]) is None  # too small to keep: drawn every time
    assert kept.origin(first["w"].clone()) is None  # a tensor this did not give out
    first["w"][0, 0] = 7.0  # written to: no longer the draw's values
    assert kept.origin(first["w"]) is None
    fresh = materialize(LAYER, _case(17))["w"]  # drawn afresh, and named again
    assert kept.origin(fresh) is not None and fresh[0, 0] != 7.0
    large = materialize(LAYER, _case(8, w="large"))["w"]
    assert kept.origin(large) not in (None, kept.origin(fresh))
    generated = Draws(1 << 30).get("generator", lambda: {"w": torch.zeros(SMALLEST)}, {"w"})
    assert generated["w"] is not None


# a layer with three weights of the same shape, each drawn of its own (a mixture's gate, up
# and down projections, say)
THREE = Problem(
    name="three weights",
    reference=lambda x, a, b, c: x @ a @ b @ c,
    axes=("tokens", "hidden", "out"),
    inputs=(
        TensorInput("x", ("tokens", "hidden")),
        *(TensorInput(name, ("hidden", "out"), role="weight") for name in ("a", "b", "c")),
    ),
    outputs=(Output("y", ("tokens", "out"), "x"),),
    workloads=({"tokens": 8, "hidden": 1024, "out": 1024},),
)


def test_a_cases_draws_past_the_room_keep_those_that_fit_for_the_next_case(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    weight = 1024 * 1024 * 4  # bytes of one float32 weight
    kept = Draws(2 * weight + weight // 2)  # room for two of the three
    monkeypatch.setattr(materialize_module, "DRAWS", kept)
    first = materialize(THREE, _case(8))
    again = materialize(THREE, _case(17))  # another batch size: the same three weights
    # the first two stay kept for every case (one after another, each pushing out the one
    # before, would have left the next case none of them)
    assert again["a"] is first["a"] and again["b"] is first["b"]
    assert again["c"] is not first["c"] and torch.equal(again["c"], first["c"])
    assert len(kept) == 2
    # outside a case, the least recently used draw still makes room for a new one
    kept.get("other", lambda: torch.zeros(1024 * 1024))
    assert len(kept) == 2 and materialize(THREE, _case(8))["a"] is not first["a"]


def test_a_generators_values_may_push_out_the_draws_made_for_them() -> None:
    one = SMALLEST * 4
    draws = Draws(3 * one)

    def generator() -> dict[str, object]:
        inner = [draws.get(name, lambda: torch.zeros(SMALLEST)) for name in ("w1", "w2")]
        return {"w": inner[0] + inner[1], "x": torch.ones(SMALLEST)}

    with draws.together():
        values = draws.get("generator", generator)
    # the values (two tensors) are kept, pushing out one of the draws they were made from
    assert draws.holds("generator") and len(draws) == 2
    with draws.together():
        assert draws.get("generator", generator)["w"] is values["w"]


def _counted(calls: list[str], name: str, elements: int = SMALLEST):
    def made() -> torch.Tensor:
        calls.append(name)
        return torch.zeros(elements)

    return made


def test_a_draw_left_unkept_is_still_named_for_its_device_copy() -> None:
    draws = Draws(SMALLEST * 4)  # room for one draw
    with draws.together():
        first = draws.get("a", _counted([], "a"))
        second = draws.get("b", _counted([], "b"))  # no room beside "a": drawn, not kept
    assert draws.holds("a") and not draws.holds("b")
    # named all the same: a copy of it the trusted side keeps on the device is found again
    assert draws.origin(second) == "b" and draws.origin(first) == "a"


def test_a_draw_written_to_holds_no_room_in_its_case() -> None:
    draws, calls = Draws(SMALLEST * 4), []
    with draws.together():
        draws.get("a", _counted(calls, "a")).add_(1.0)  # written to: no longer the draw
        draws.get("b", _counted(calls, "b"))
    assert not draws.holds("a") and draws.holds("b")


def test_each_thread_makes_its_case_in_a_scope_of_its_own() -> None:
    import threading

    draws, calls = Draws(SMALLEST * 4), []
    with draws.together():
        draws.get("a", _counted(calls, "a"))
        # a case made meanwhile in another thread is not held back by this one's draws
        other = threading.Thread(target=lambda: draws.get("b", _counted(calls, "b")))
        other.start()
        other.join()
    assert draws.holds("b") and not draws.holds("a")


def test_a_weight_drawn_after_activations_that_change_with_the_batch_is_kept_again() -> None:
    draws, calls = Draws(SMALLEST * 4 * 4), []
    small = [("x small", 1), ("w", 2)]
    large = [("x large", 3), ("w", 2)]
    for case in (small, large, small):
        with draws.together():
            for name, pieces in case:
                draws.get(name, _counted(calls, name, pieces * SMALLEST))
    # at the large size the weight was pushed out by the activations drawn first; drawn
    # again there, it may push them out in turn (drawn in that case, not found kept), and the
    # next small case finds it kept
    assert calls == ["x small", "w", "x large", "w", "x small"]


def test_a_draw_made_twice_at_once_takes_its_room_once() -> None:
    draws = Draws(2 * SMALLEST * 4)  # room for two draws

    def made_twice() -> torch.Tensor:
        # kept meanwhile, as another thread making the same case would keep it
        draws.get("a", lambda: torch.zeros(SMALLEST))
        return torch.zeros(SMALLEST)

    draws.get("a", made_twice)
    draws.get("b", lambda: torch.ones(SMALLEST))
    assert draws.holds("a") and draws.holds("b")  # counted once, "a" leaves room for "b"
