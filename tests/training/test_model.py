import math
from collections.abc import Callable, Mapping
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from kernelaudit.errors import UsageError
from kernelaudit.problem.spec import SLOTS
from kernelaudit.training.data import batches, token_counts, token_stream
from kernelaudit.training.model import (
    RMSNORM_EPS,
    ROPE_BASE,
    ModelConfig,
    TinyDecoder,
    init_parameters,
)
from kernelaudit.training.slots import REFERENCES, Plug, Slots

# Two layers, so gradients flow through a residual stream between blocks.
GRADIENT_CONFIG = ModelConfig(vocab=48, hidden=16, layers=2, heads=2, seq=8, mlp_hidden=24)


def plain_loss(
    parameters: Mapping[str, torch.Tensor], tokens: torch.Tensor, config: ModelConfig
) -> torch.Tensor:
    """The model's architecture written with torch's own differentiable ops."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    batch, length = inputs.shape
    heads, head_dim = config.heads, config.hidden // config.heads
    dtype = parameters["embedding"].dtype

    def norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMSNORM_EPS) * weight

    frequency = ROPE_BASE ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angle = torch.outer(torch.arange(length, dtype=torch.float64), frequency)
    cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        first, second = x[..., : head_dim // 2], x[..., head_dim // 2 :]
        return torch.cat((first * cos - second * sin, first * sin + second * cos), -1)

    def split(x: torch.Tensor) -> torch.Tensor:
        return x.view(batch, length, heads, head_dim).transpose(1, 2)

    h = F.embedding(inputs, parameters["embedding"])
    for layer in range(config.layers):
        p = {name.split(".")[-1]: v for name, v in parameters.items() if f"layers.{layer}." in name}
        x = norm(h, p["attention_norm"])
        q, k, v = split(x @ p["q"]), split(x @ p["k"]), split(x @ p["v"])
        attended = F.scaled_dot_product_attention(rotate(q), rotate(k), v, is_causal=True)
        h = h + attended.transpose(1, 2).reshape(batch, length, config.hidden) @ p["o"]
        x = norm(h, p["mlp_norm"])
        h = h + (F.silu(x @ p["gate"]) * (x @ p["up"])) @ p["down"]
    h = norm(h, parameters["final_norm"])
    head = parameters["embedding"].t() if config.tied else parameters["lm_head"]
    return F.cross_entropy((h @ head).reshape(-1, config.vocab), targets.reshape(-1))


def spread_parameters(config: ModelConfig, seed: int) -> dict[str, torch.Tensor]:
    """float64 parameters far from the init, so every nonlinearity bends the gradients."""
    generator = torch.Generator().manual_seed(seed)
    spread = {}
    for name, value in init_parameters(config, seed).items():
        noise = 0.3 * torch.randn(value.shape, generator=generator, dtype=torch.float64)
        spread[name] = noise + 1 if name.endswith("norm") else noise
    return spread


def train(model: TinyDecoder, steps: torch.Tensor, lr: float = 0.5) -> list[float]:
    optimiser = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for tokens in steps:
        optimiser.zero_grad()
        loss = model(tokens)
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("tied", [True, False])
def test_slot_routed_gradients_equal_plain_torch_autograd(tied: bool) -> None:
    config = replace(GRADIENT_CONFIG, tied=tied)
    parameters = spread_parameters(config, seed=3)
    tokens = torch.randint(
        config.vocab, (3, config.seq + 1), generator=torch.Generator().manual_seed(0)
    )

    model = TinyDecoder(config, Slots()).double()
    model.load_state_dict(parameters)
    loss = model(tokens)
    loss.backward()

    leaves = {name: v.clone().requires_grad_() for name, v in parameters.items()}
    expected = plain_loss(leaves, tokens, config)
    expected.backward()

    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=0)
    assert ("lm_head" in dict(model.named_parameters())) is not tied
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, name
        torch.testing.assert_close(parameter.grad, leaves[name].grad, rtol=1e-9, atol=1e-13)


def test_every_slot_runs_in_every_direction_of_a_step() -> None:
    config = ModelConfig.tiny()
    slots = Slots()
    model = TinyDecoder(config, slots)
    model(torch.randint(config.vocab, (2, config.seq + 1))).backward()
    # q, k, v, o, gate, up, down and the LM head: each product runs once forward and twice
    # backward (for both operands); rope turns q and k forward and back.
    layers = config.layers
    assert slots.calls == {
        "embedding_forward": 1,
        "embedding_backward": 1,
        "rmsnorm_forward": 2 * layers + 1,
        "rmsnorm_backward": 2 * layers + 1,
        "softmax": layers,
        "cross_entropy_forward": 1,
        "cross_entropy_backward": 1,
        "matmul": 3 * (7 * layers + 1),
        "rope": 4 * layers,
        "swiglu": layers,
    }


@pytest.mark.parametrize("slot", SLOTS)
def test_reference_plugged_at_the_model_dtype_trains_bit_for_bit_like_no_plug(slot: str) -> None:
    config = ModelConfig.tiny()
    steps = batches(token_stream(config.vocab, 2000, seed=0), 4, config.seq, 3, seed=0)
    float32 = (torch.float32,) * len(SLOTS[slot])
    plugged = TinyDecoder(config, Slots(Plug(slot, REFERENCES[slot], float32)), seed=1)
    alone = TinyDecoder(config, Slots(), seed=1)
    assert train(plugged, steps) == train(alone, steps)
    for (name, a), b in zip(plugged.named_parameters(), alone.parameters(), strict=True):
        assert torch.equal(a, b), name


def test_plug_gets_its_declared_dtypes_and_runs_once_per_step_in_backward() -> None:
    seen: list[tuple[torch.dtype, torch.dtype, int]] = []

    def half_embedding_backward(grad_out: torch.Tensor, ids: torch.Tensor, n: int) -> object:
        seen.append((grad_out.dtype, ids.dtype, n))
        return REFERENCES["embedding_backward"](grad_out, ids, n)

    config = ModelConfig.tiny()
    plug = Plug("embedding_backward", half_embedding_backward, (torch.float16, None, None))
    slots = Slots(plug)
    model = TinyDecoder(config, slots)
    steps = batches(token_stream(config.vocab, 2000, seed=0), 4, config.seq, 3, seed=0)
    train(model, steps)
    assert seen == [(torch.float16, torch.int64, config.vocab)] * 3
    assert slots.calls["embedding_backward"] == 3
    assert model.embedding.dtype == torch.float32


def test_integer_dtype_reaches_the_plug_as_declared() -> None:
    seen: list[torch.dtype] = []

    def gather(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        seen.append(ids.dtype)
        return weight[ids.long()]

    config = ModelConfig.tiny()
    model = TinyDecoder(config, Slots(Plug("embedding_forward", gather, (None, torch.int32))))
    model(torch.randint(config.vocab, (2, 5)))
    assert seen == [torch.int32]


@pytest.mark.parametrize(
    ("returns", "described"),
    [
        (lambda a, b: torch.zeros(a.shape[0], b.shape[1] + 1), "shape [32, 33]"),
        (lambda a, b: (a @ b).tolist(), "a list"),
        (lambda a, b: (a @ b).long(), "torch.int64"),
    ],
)
def test_wrong_result_from_a_plug_fails_naming_the_slot_and_shapes(
    returns: Callable[..., object], described: str
) -> None:
    config = ModelConfig.tiny()
    model = TinyDecoder(config, Slots(Plug("matmul", returns, (None, None))))
    with pytest.raises(RuntimeError, match="slot 'matmul'") as failure:
        model(torch.randint(config.vocab, (2, 17)))
    assert not isinstance(failure.value, UsageError)
    assert described in str(failure.value) and "shape [32, 32]" in str(failure.value)


def test_sgd_on_the_token_stream_lowers_the_loss() -> None:
    config = ModelConfig.tiny()
    stream = token_stream(config.vocab, 20_000, seed=0)
    losses = train(TinyDecoder(config, Slots(), seed=0), batches(stream, 16, config.seq, 40, 1))
    assert losses[0] == pytest.approx(math.log(config.vocab), abs=0.05)
    assert sum(losses[-10:]) / 10 < losses[0] - 0.6


def test_stream_is_zipf_skewed_with_the_hottest_id_set_by_the_seed() -> None:
    vocab = 1000
    counts = token_stream(vocab, 200_000, seed=0).bincount(minlength=vocab)
    assert counts.max() > 50 * counts.median()
    hottest = {int(token_stream(vocab, 20_000, seed=s).bincount().argmax()) for s in range(4)}
    assert len(hottest) > 1


def test_stream_holds_structure_below_its_unigram_entropy() -> None:
    vocab = 256
    stream = token_stream(vocab, 200_000, seed=0)

    def entropy(counts: torch.Tensor) -> float:
        p = counts[counts > 0].double() / counts.sum()
        return float(-(p * p.log()).sum())

    pairs = (stream[:-1] * vocab + stream[1:]).bincount(minlength=vocab * vocab)
    conditional = entropy(pairs) - entropy(stream[:-1].bincount(minlength=vocab))
    assert conditional < entropy(stream.bincount(minlength=vocab)) - 1.0


def test_stream_batches_and_counts_are_seeded_windows() -> None:
    stream = token_stream(100, 5000, seed=7)
    assert stream.dtype == torch.int64 and stream.min() >= 0 and stream.max() < 100
    assert torch.equal(stream, token_stream(100, 5000, seed=7))
    assert not torch.equal(stream, token_stream(100, 5000, seed=8))

    windows = batches(stream, batch=4, seq=16, steps=6, seed=2)
    assert windows.shape == (6, 4, 17)
    assert torch.equal(windows, batches(stream, batch=4, seq=16, steps=6, seed=2))
    every_window = stream.unfold(0, 17, 1)
    for window in windows.reshape(-1, 17):
        assert (every_window == window).all(-1).any()

    counts = token_counts(windows, 100)
    assert counts.shape == (100,) and counts.sum() == 6 * 4 * 16
    assert torch.equal(counts, windows[..., :-1].reshape(-1).bincount(minlength=100))


def test_init_is_seeded_and_names_every_parameter() -> None:
    for config in (ModelConfig.tiny(), replace(ModelConfig.tiny(), tied=False)):
        parameters = init_parameters(config, seed=5)
        model = TinyDecoder(config, Slots(), seed=5)
        assert parameters.keys() == dict(model.named_parameters()).keys()
        for name, value in model.state_dict().items():
            assert value.dtype == torch.float32 and torch.equal(value, parameters[name]), name
    parameters = init_parameters(ModelConfig.tiny(), seed=5)
    again = init_parameters(ModelConfig.tiny(), seed=5)
    other = init_parameters(ModelConfig.tiny(), seed=6)
    assert all(torch.equal(again[name], value) for name, value in parameters.items())
    assert not torch.equal(other["embedding"], parameters["embedding"])
    assert torch.equal(parameters["final_norm"], torch.ones(32))
    assert parameters["layers.0.q"].std().item() == pytest.approx(0.02, rel=0.1)


def test_references_reduce_in_float32_at_half_precision() -> None:
    # 4096 gradients of one row: an fp16 running sum stalls long before the true total.
    grad_out = torch.full((4096, 8), 0.01, dtype=torch.float16)
    ids = torch.zeros(4096, dtype=torch.int64)
    grad = REFERENCES["embedding_backward"](grad_out, ids, 3)
    assert grad.dtype == torch.float16 and grad.shape == (3, 8)
    truth = 4096 * float(torch.tensor(0.01, dtype=torch.float16))
    assert float(grad[0, 0]) == pytest.approx(truth, rel=1e-3)
    loss = REFERENCES["cross_entropy_forward"](torch.zeros(2, 5, dtype=torch.bfloat16), ids[:2])
    assert loss.dtype == torch.float32


def test_rmsnorm_backward_reference_matches_autograd_of_its_forward() -> None:
    generator = torch.Generator().manual_seed(0)
    x, weight, grad = (
        torch.randn(shape, generator=generator, dtype=torch.float64)
        for shape in ((5, 12), (12,), (5, 12))
    )
    x.requires_grad_()
    weight.requires_grad_()
    REFERENCES["rmsnorm_forward"](x, weight, RMSNORM_EPS).backward(grad)
    rstd = torch.rsqrt(x.detach().pow(2).mean(-1) + RMSNORM_EPS)
    grad_x, grad_weight = REFERENCES["rmsnorm_backward"](grad, x.detach(), weight.detach(), rstd)
    torch.testing.assert_close(grad_x, x.grad)
    torch.testing.assert_close(grad_weight, weight.grad)


def test_slot_tables_cover_exactly_the_declared_slots() -> None:
    assert tuple(REFERENCES) == tuple(SLOTS)


@pytest.mark.parametrize(
    ("sizes", "field"),
    [
        ({"hidden": 30, "heads": 4}, "multiple of heads"),
        ({"hidden": 18, "heads": 2}, "odd"),
        ({"layers": 0}, "'layers'"),
    ],
)
def test_invalid_config_is_a_usage_error(sizes: dict[str, int], field: str) -> None:
    with pytest.raises(UsageError, match=field):
        replace(ModelConfig.tiny(), **sizes)


def test_unknown_slot_or_wrong_dtype_count_is_a_usage_error_listing_the_slots() -> None:
    with pytest.raises(UsageError, match=r"'layernorm'.*embedding_forward.*swiglu"):
        Plug("layernorm", REFERENCES["softmax"], (None,))
    with pytest.raises(UsageError, match="'layernorm'"):
        Slots().call("layernorm", torch.zeros(2))
    with pytest.raises(UsageError, match=r"3 arguments \(x, cos, sin\)"):
        Plug("rope", REFERENCES["rope"], (torch.float16,))


def test_too_long_windows_are_a_usage_error() -> None:
    config = ModelConfig.tiny()
    with pytest.raises(UsageError, match="at most 17 tokens"):
        TinyDecoder(config, Slots())(torch.zeros(2, 18, dtype=torch.int64))
