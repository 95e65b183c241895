"""Judging training runs against the envelope of one-ulp perturbations."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from kernelaudit.training.data import batches, token_stream
from kernelaudit.training.envelope import DRIFT_SLACK, conclusion, judge
from kernelaudit.training.loop import Experiment, Perturbed, Rounded, Trajectory, noise_ulps
from kernelaudit.training.model import ModelConfig, TinyDecoder
from kernelaudit.training.shadow import Shadowed, shadow, shadow_all
from kernelaudit.training.slots import REFERENCES, Plug

REFERENCE_LOSSES = [3.0 - 0.01 * s for s in range(40)]
HOT = torch.tensor([5, 6])


def _run(optimizer: str, losses: list[float], error: str = "") -> Trajectory:
    return Trajectory(optimizer, tuple(losses), {}, slot_calls=1, error=error)


def _noise(optimizer: str, seed: int) -> Shadowed:
    """Summed rounding noise: the same size in every row."""
    generator = torch.Generator().manual_seed(seed)
    drift = 1e-6 * torch.randn(8, 4, generator=generator, dtype=torch.float64)
    return Shadowed(optimizer, {"embedding": drift}, slot_calls=1)


def _envelope(optimizer: str) -> tuple[list[Trajectory], list[Shadowed]]:
    perturbed = [
        _run(optimizer, [v + 1e-6 * (seed + 1) for v in REFERENCE_LOSSES]) for seed in range(3)
    ]
    return perturbed, [_noise(optimizer, seed) for seed in range(3)]


def _judge(optimizer: str, candidate: Shadowed, losses: list[float] | None = None):  # type: ignore[no-untyped-def]
    perturbed, shadows = _envelope(optimizer)
    run = _run(optimizer, losses or [v + 2e-6 for v in REFERENCE_LOSSES])
    reference = _run(optimizer, REFERENCE_LOSSES)
    return judge(reference, perturbed, run, shadows, candidate, {"embedding": HOT})


def test_noise_like_the_envelopes_passes_and_a_drifting_hot_row_departs() -> None:
    inside = _judge("sgd", _noise("sgd", 7))
    assert not inside.departs and inside.drift_ratio < DRIFT_SLACK
    biased = _noise("sgd", 7).drift["embedding"].clone()
    biased[5] += 1e-5  # one frequent token's row pulled off, step after step
    outside = _judge("sgd", Shadowed("sgd", {"embedding": biased}, slot_calls=1))
    assert outside.parameters_depart and not outside.loss_departs
    worst = outside.drifts[0]
    assert worst.parameter == "embedding[hot rows]"
    embedding = next(d for d in outside.drifts if d.parameter == "embedding")
    assert embedding.furthest_rows[0][0] == 5


def test_a_run_that_stopped_departs() -> None:
    stopped = _judge("adamw", Shadowed("adamw", {}, error="step 0: boom"))
    assert stopped.departs and stopped.error == "step 0: boom"


def test_conclusion_says_adamw_masks_what_sgd_shows() -> None:
    off = _noise("sgd", 7).drift["embedding"].clone()
    off[2] += 1e-4
    sgd = _judge("sgd", Shadowed("sgd", {"embedding": off}, slot_calls=1))
    adamw = _judge("adamw", _noise("adamw", 9))
    text = conclusion([sgd, adamw])
    assert "departs" in text and "AdamW masks the error" in text
    assert "masks" not in conclusion([adamw])
    lost = _judge("adamw", _noise("adamw", 9), [v + 1.0 for v in REFERENCE_LOSSES])
    assert lost.loss_departs and "masks" not in conclusion([sgd, lost])


def test_perturbed_results_are_one_ulp_away() -> None:
    nudged = Perturbed(lambda x: x * 1.0, seed=3)
    x = torch.randn(1000, dtype=torch.float16)
    y = nudged(x)
    assert isinstance(y, torch.Tensor)
    steps = (y.float() - x.float()).abs() / (
        torch.nextafter(x.abs(), torch.tensor(float("inf"), dtype=torch.float16)) - x.abs()
    ).float()
    assert torch.all((steps > 0.49) & (steps < 2.01))  # one ulp (two at a binade edge)
    assert 300 < int((y > x).sum()) < 700  # up or down at random
    other = Perturbed(lambda x: x * 1.0, seed=4)(x)
    assert isinstance(other, torch.Tensor) and not torch.equal(other, y)  # seeds differ


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_a_perturbed_result_moves_each_element_the_way_a_seeded_coin_says(
    dtype: torch.dtype,
) -> None:
    # the envelope's draws are reproducible: the same seed and call give the same coin per
    # element, and each element moves one step that way, zeros, infinities and NaN included
    values = torch.randn(64, 33, dtype=torch.float64) * 3
    values[0, :4] = torch.tensor([0.0, -0.0, float("inf"), float("-inf")], dtype=torch.float64)
    values[1, :3] = torch.tensor([float("nan"), 1e-30, -1e-30], dtype=torch.float64)
    got = Perturbed(lambda x: x * 1.0, seed=5)(values.to(dtype))
    assert isinstance(got, torch.Tensor)
    rounded = values.to(dtype)
    generator = torch.Generator().manual_seed(5 * 1_000_003 + 1 * 7 + 0)
    up = torch.rand(rounded.shape, generator=generator) < 0.5
    infinity = torch.tensor(float("inf"), dtype=dtype)
    want = torch.nextafter(rounded, torch.where(up, infinity, -infinity))
    if noise_ulps(dtype) > 1:  # float32 results move the oracle's floor, in ulps
        ulp = (want.double() - rounded.double()).nan_to_num(0.0, 0.0, 0.0)
        want = (rounded.double() + noise_ulps(dtype) * ulp).to(dtype)
    bits = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}
    assert torch.equal(got.isnan(), want.isnan())
    finite = ~want.isnan()
    assert torch.equal(got.view(bits[dtype])[finite], want.view(bits[dtype])[finite])


def _shadow(optimizer: str, function, steps: int = 6) -> Shadowed:  # type: ignore[no-untyped-def]
    config = ModelConfig(vocab=64, hidden=32, layers=1, heads=2, seq=8, mlp_hidden=64)
    experiment = Experiment(config, steps=steps, batch=4)
    tokens = batches(token_stream(64, 4096, 0), 4, 8, steps, 0)
    dtypes = (torch.float32, torch.int64, None)
    reference = Plug("embedding_backward", REFERENCES["embedding_backward"], dtypes)
    plug = Plug("embedding_backward", function, dtypes)
    return shadow(experiment, optimizer, reference, plug, tokens, "cpu")


def test_shadowing_measures_only_what_the_plugged_gradient_changes() -> None:
    same = _shadow("sgd", REFERENCES["embedding_backward"])
    assert same.slot_calls == 6 and not same.error
    assert all(float(d.abs().max()) == 0.0 for d in same.drift.values())

    def shrunk(by: float):  # type: ignore[no-untyped-def]
        def backward(grad_out, ids, num_embeddings):  # type: ignore[no-untyped-def]
            return by * REFERENCES["embedding_backward"](grad_out, ids, num_embeddings)

        return backward

    for optimizer in ("sgd", "adamw"):
        biased = _shadow(optimizer, shrunk(0.9))
        moved = {n for n, d in biased.drift.items() if float(d.abs().max()) > 0}
        # the trajectory is the reference's: only the embedding's own update differs
        assert moved == {"embedding"}, (optimizer, moved)
    # with the trajectory fixed, SGD's drift is linear in the gradient's error: no chaos
    once, twice = _shadow("sgd", shrunk(0.9)), _shadow("sgd", shrunk(0.8))
    torch.testing.assert_close(
        twice.drift["embedding"], 2 * once.drift["embedding"], rtol=1e-4, atol=1e-9
    )


def test_a_failing_plug_stops_the_shadow_with_its_message() -> None:
    def broken(grad_out, ids, num_embeddings):  # type: ignore[no-untyped-def]
        raise RuntimeError("no kernel for this shape")

    run = _shadow("sgd", broken)
    assert "no kernel for this shape" in run.error and run.slot_calls == 0


def test_shadowing_several_plugs_at_once_gives_each_what_it_gets_alone() -> None:
    config = ModelConfig(vocab=64, hidden=32, layers=1, heads=2, seq=8, mlp_hidden=64)
    experiment = Experiment(config, steps=6, batch=4)
    tokens = batches(token_stream(64, 4096, 0), 4, 8, 6, 0)
    dtypes = (torch.float16, torch.int64, None)
    reference = REFERENCES["embedding_backward"]

    def fails_at_step_3():  # type: ignore[no-untyped-def]
        calls = []

        def backward(grad_out, ids, num_embeddings):  # type: ignore[no-untyped-def]
            calls.append(1)
            if len(calls) > 3:
                raise RuntimeError("out of workspace")
            return reference(grad_out, ids, num_embeddings)

        return backward

    def plugs() -> list[Plug]:  # fresh each time: a perturbed plug counts its own calls
        functions = [Perturbed(reference, 1), Perturbed(reference, 2), fails_at_step_3()]
        return [Plug("embedding_backward", f, dtypes) for f in functions]

    for optimizer in ("sgd", "adamw"):
        centre = Plug("embedding_backward", reference, dtypes)
        together = shadow_all(experiment, optimizer, centre, plugs(), tokens, "cpu")
        alone = [shadow(experiment, optimizer, centre, p, tokens, "cpu") for p in plugs()]
        for one, other in zip(together, alone, strict=True):
            assert (one.slot_calls, one.error) == (other.slot_calls, other.error)
            assert one.drift.keys() == other.drift.keys()
            for name in one.drift:
                assert torch.equal(one.drift[name], other.drift[name]), (optimizer, name)
        assert together[0].slot_calls == 6 and not together[0].error
        assert any(float(d.abs().max()) > 0 for d in together[0].drift.values())
        assert together[2].slot_calls == 3 and "out of workspace" in together[2].error


_SHADOW_CONFIG = ModelConfig(vocab=64, hidden=32, layers=1, heads=2, seq=8, mlp_hidden=64)
_SHADOW_EXPERIMENT = Experiment(_SHADOW_CONFIG, steps=5, batch=4)
_SHADOW_TOKENS = batches(token_stream(64, 4096, 0), 4, 8, 5, 0)


def _shadows(
    slot: str,
    functions: list[Callable[..., object]],
    optimizer: str,
    share_forward: bool,
    device: str = "cpu",
) -> list[Shadowed]:
    """Each function shadowing the correctly rounded reference in `slot`, its arguments as the
    model has them (no casts: the model's own tensors reach it)."""
    dtypes = (None,) * {"embedding_backward": 3, "rmsnorm_backward": 4}[slot]
    centre = Plug(slot, Rounded(REFERENCES[slot]), dtypes)
    plugs = [Plug(slot, f, dtypes) for f in functions]
    return shadow_all(
        _SHADOW_EXPERIMENT, optimizer, centre, plugs, _SHADOW_TOKENS, device, share_forward
    )


def _same(one: Shadowed, other: Shadowed) -> bool:
    return (one.slot_calls, one.error, one.drift.keys()) == (
        other.slot_calls,
        other.error,
        other.drift.keys(),
    ) and all(torch.equal(one.drift[n], other.drift[n]) for n in one.drift)


@pytest.mark.parametrize("slot", ["embedding_backward", "rmsnorm_backward"])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_backward_passes_through_one_shared_forward_give_what_their_own_forwards_give(
    slot: str, optimizer: str, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def functions() -> list[Callable[..., object]]:  # fresh: a perturbed plug counts its calls
        return [Perturbed(REFERENCES[slot], 1), Perturbed(REFERENCES[slot], 2), REFERENCES[slot]]

    forwards = []
    forward = TinyDecoder.forward

    def counted(model: TinyDecoder, tokens: torch.Tensor) -> torch.Tensor:
        forwards.append(1)
        return forward(model, tokens)

    monkeypatch.setattr(TinyDecoder, "forward", counted)
    shared = _shadows(slot, functions(), optimizer, share_forward=True, device=device)
    assert len(forwards) == _SHADOW_EXPERIMENT.steps  # one per step, not one per gradient
    apart = _shadows(slot, functions(), optimizer, share_forward=False, device=device)
    assert len(forwards) == _SHADOW_EXPERIMENT.steps * (1 + 4)  # three plugs and the centre
    assert all(_same(one, other) for one, other in zip(shared, apart, strict=True))
    assert shared[0].slot_calls > 0
    assert any(float(d.abs().max()) > 0 for d in shared[0].drift.values())


def test_a_plug_that_writes_into_its_arguments_leaves_the_others_shadows_alone() -> None:
    # an RMSNorm's backward gets the forward pass's saved input and the norm's weight itself
    slot = "rmsnorm_backward"
    reference = REFERENCES[slot]

    def scribbles(*arguments: object) -> object:
        result = reference(*arguments)
        for argument in arguments:  # what a careless reference may do to its inputs
            if isinstance(argument, torch.Tensor) and argument.is_floating_point():
                argument.mul_(3.0)
        return result

    alone = _shadows(slot, [Perturbed(reference, 1)], "sgd", share_forward=True)
    beside = _shadows(slot, [scribbles, Perturbed(reference, 1)], "sgd", share_forward=True)
    assert _same(beside[1], alone[0])
    assert beside[0].slot_calls == alone[0].slot_calls


def test_one_loss_spike_in_the_tail_does_not_depart_but_a_held_gap_does() -> None:
    # SGD's free-running losses spike now and then, wherever chaos puts it: one step of the
    # judged tail far off is what a correct kernel's run can show
    spiked = [v + 2e-6 for v in REFERENCE_LOSSES]
    spiked[-3] += 5.0
    assert not _judge("sgd", _noise("sgd", 7), spiked).loss_departs
    # most of the judged quarter off (6 of its 10 steps): the model trains differently
    held = [v + (1e-3 if s >= 34 else 2e-6) for s, v in enumerate(REFERENCE_LOSSES)]
    judged = _judge("sgd", _noise("sgd", 7), held)
    assert judged.loss_departs and judged.loss_ratio > 100


def test_a_short_runs_loss_is_reported_not_judged_and_the_drift_decides() -> None:
    far = [v + 1e-3 for v in REFERENCE_LOSSES]  # hundreds of envelopes off
    perturbed, shadows = _envelope("sgd")
    reference = _run("sgd", REFERENCE_LOSSES)
    short = judge(reference, perturbed, _run("sgd", far), shadows, _noise("sgd", 7), None, False)
    assert short.loss_ratio > 100 and not short.loss_judged
    assert not short.loss_departs and not short.departs
    assert "not judged" in conclusion([short])
    biased = _noise("sgd", 7).drift["embedding"].clone()
    biased[5] += 1e-5
    drifting = Shadowed("sgd", {"embedding": biased}, slot_calls=1)
    departs = judge(reference, perturbed, _run("sgd", far), shadows, drifting, None, False)
    assert departs.departs and not departs.loss_departs
    said = conclusion([departs])
    assert "parameter updates drift up to" in said and "is not judged" in said
    # AdamW's healthy updates mask what SGD's show, where its loss is not judged either
    adamw = judge(
        reference, perturbed, _run("adamw", far), shadows, _noise("adamw", 9), None, False
    )
    sgd = judge(
        reference, perturbed, _run("sgd", far), shadows, drifting, {"embedding": HOT}, False
    )
    assert "AdamW masks the error: under AdamW the parameter updates stay within" in conclusion(
        [sgd, adamw]
    )
