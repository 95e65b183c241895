"""The experiment's runs: the correctly rounded slot, the shadow's optimizer updates, the drift."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelaudit.problem.load import load_problem
from kernelaudit.training.data import batches, token_stream
from kernelaudit.training.experiment import _reference_runs, slot_dtypes
from kernelaudit.training.loop import Biased, Experiment, Perturbed, Rounded, biased_member
from kernelaudit.training.model import ModelConfig, init_parameters
from kernelaudit.training.shadow import _Updates, shadow
from kernelaudit.training.slots import REFERENCES, Plug

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _counted(function):  # type: ignore[no-untyped-def]
    """`function`, with how often it ran natively (at a floating dtype below float64)."""
    native = []

    def run(*args):  # type: ignore[no-untyped-def]
        if any(isinstance(a, torch.Tensor) and a.dtype == torch.float16 for a in args):
            native.append(1)
        return function(*args)

    return run, native


def test_rounded_results_are_the_float64_truth_rounded_to_the_native_dtypes() -> None:
    backward, native = _counted(REFERENCES["rmsnorm_backward"])
    rounded = Rounded(backward)
    g, x = torch.randn(16, 8, dtype=torch.float16), torch.randn(16, 8, dtype=torch.float16)
    w = torch.randn(8, dtype=torch.float16)
    rstd = torch.rand(16) + 0.5
    for _ in range(3):
        grad_x, grad_w = rounded(g, x, w, rstd)  # type: ignore[misc]
        truth = REFERENCES["rmsnorm_backward"](g.double(), x.double(), w.double(), rstd.double())
        assert torch.equal(grad_x, truth[0].half()) and torch.equal(grad_w, truth[1].half())
    # the native run only tells the results' dtypes, once per shape
    assert len(native) == 1
    rounded(g[:4], x[:4], w, rstd[:4])
    assert len(native) == 2


def test_a_result_that_is_not_floating_keeps_its_native_value_every_call() -> None:
    def top(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = x.float().topk(2, dim=-1)
        return values.to(x.dtype), indices + (1 if x.dtype == torch.float16 else 0)

    run, native = _counted(top)
    rounded = Rounded(run)
    x = torch.randn(4, 8, dtype=torch.float16)
    for _ in range(2):
        values, indices = rounded(x)  # type: ignore[misc]
        assert values.dtype == torch.float16
        assert torch.equal(indices, x.float().topk(2, dim=-1).indices + 1)  # the native one
    assert len(native) == 2


def test_perturbed_runs_skip_the_native_run_and_stay_seeded() -> None:
    run, native = _counted(lambda x: x * 1.0)
    x = torch.randn(256, dtype=torch.float16)
    first = Perturbed(run, seed=5)(x)
    again = Perturbed(run, seed=5)
    assert torch.equal(again(x), first)  # type: ignore[arg-type]  # the same draws
    again(x)
    assert len(native) == 2  # one per fresh Perturbed, none for its later calls


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_shadow_updates_are_torchs_optimizer_steps_in_float64(optimizer: str) -> None:
    experiment = Experiment(ModelConfig.tiny(), steps=1, batch=1)
    parameters = {
        "a": torch.randn(5, 3, dtype=torch.float64),
        "b": torch.randn(7, dtype=torch.float64),
    }
    updates = _Updates(experiment, optimizer)
    copies = {n: torch.nn.Parameter(p.clone()) for n, p in parameters.items()}
    if optimizer == "sgd":
        step: torch.optim.Optimizer = torch.optim.SGD(copies.values(), lr=experiment.sgd_lr)
    else:
        step = torch.optim.AdamW(copies.values(), lr=experiment.adamw_lr, weight_decay=0.0)
    for k in range(4):
        gradients = {n: torch.randn_like(p) * (k + 1) for n, p in parameters.items()}
        ours = updates({n: g.float() for n, g in gradients.items()})
        before = {n: p.detach().clone() for n, p in copies.items()}
        for n, p in copies.items():
            p.grad = gradients[n].float().double()
        step.step()
        for n, p in copies.items():
            torch.testing.assert_close(before[n] - p.detach(), ours[n], rtol=1e-12, atol=1e-15)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_shadow_on_the_gpu_drifts_as_on_the_cpu_and_hands_back_cpu_float64() -> None:
    config = ModelConfig(vocab=64, hidden=32, layers=1, heads=2, seq=8, mlp_hidden=64)
    experiment = Experiment(config, steps=5, batch=4)
    tokens = batches(token_stream(64, 4096, 0), 4, 8, 5, 0)
    dtypes = (torch.float16, torch.int64, None)

    def shrunk(grad_out, ids, num_embeddings):  # type: ignore[no-untyped-def]
        return 0.9 * REFERENCES["embedding_backward"](grad_out, ids, num_embeddings)

    centre = Plug("embedding_backward", Rounded(REFERENCES["embedding_backward"]), dtypes)
    plug = Plug("embedding_backward", shrunk, dtypes)
    drifted = {d: shadow(experiment, "adamw", centre, plug, tokens, d) for d in ("cpu", "cuda")}
    assert drifted["cuda"].drift.keys() == set(init_parameters(config, 0))
    for name, drift in drifted["cuda"].drift.items():
        assert drift.device.type == "cpu" and drift.dtype == torch.float64
        torch.testing.assert_close(drift, drifted["cpu"].drift[name], rtol=0.05, atol=1e-7)
    assert float(drifted["cuda"].drift["embedding"].abs().max()) > 0


def test_the_biased_run_is_one_ulp_high_where_the_floor_is_wider_than_one_ulp() -> None:
    x32 = torch.randn(1000, dtype=torch.float32)
    y32 = Biased(lambda x: x * 1.0)(x32)
    assert isinstance(y32, torch.Tensor)
    assert torch.equal(y32, torch.nextafter(x32, torch.tensor(float("inf"))))  # every one, up
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(1000, dtype=dtype)
        assert torch.equal(Biased(lambda x: x * 1.0)(x), x)  # type: ignore[arg-type]
    assert biased_member([torch.float32]) and biased_member([torch.float16, torch.float32])
    assert not biased_member([torch.bfloat16]) and not biased_member([torch.float16])


@pytest.mark.parametrize(("dtype", "members"), [(torch.float32, 4), (torch.float16, 3)])
def test_a_float32_envelope_holds_the_biased_run_and_a_half_precision_one_does_not(
    dtype: torch.dtype, members: int
) -> None:
    problem = load_problem(EXAMPLES / "cross_entropy_backward" / "problem.py")
    config = next(k for k, c in enumerate(problem.dtype_configs()) if c["logits"] == dtype)
    experiment = Experiment(
        ModelConfig(vocab=64, hidden=16, layers=1, heads=2, seq=8, mlp_hidden=32), steps=3, batch=4
    )
    tokens = batches(token_stream(64, 4096, 0), 4, 8, 3, 0)
    runs = _reference_runs(problem, config, slot_dtypes(problem, config), experiment, tokens, "cpu")
    assert runs is not None
    for _, perturbed, shadows in runs.values():
        assert len(perturbed) == members and len(shadows) == members + 1  # and the native one
