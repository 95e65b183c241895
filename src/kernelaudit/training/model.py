"""A small decoder language model whose every slot operation runs through `Slots`.

Token embedding, then per layer RMSNorm -> causal multi-head attention with rotary positions ->
residual -> RMSNorm -> SwiGLU MLP -> residual, then a final RMSNorm, the LM head and the mean
cross-entropy of the next token. Each slot is a custom autograd function, so a plugged candidate
runs in the direction it implements: a forward kernel in the forward pass, a backward kernel in
the backward pass, with the other direction left to the reference.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch
from torch import nn

from kernelaudit.errors import UsageError
from kernelaudit.training.slots import Slots, rmsnorm_rstd

RMSNORM_EPS = 1e-6
"""The eps of every RMSNorm of the model."""

ROPE_BASE = 10_000.0
"""Rotary frequencies: pair i of a head turns by position * ROPE_BASE^(-2i / head_dim)."""

INIT_STD = 0.02


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the model. `tied`: the LM head is the transposed token embedding."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    seq: int
    mlp_hidden: int
    tied: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab", "hidden", "layers", "heads", "seq", "mlp_hidden"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(
                    f"model config field {name!r} is {value!r}; give a positive integer"
                )
        if self.hidden % self.heads:
            raise UsageError(
                f"model config hidden={self.hidden} does not split into heads={self.heads} "
                "equal heads; make hidden a multiple of heads"
            )
        if self.head_dim % 2:
            raise UsageError(
                f"model config head_dim = hidden / heads = {self.head_dim} is odd, but rotary "
                "positions turn pairs of features; choose hidden and heads with an even ratio"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def tiny(cls) -> ModelConfig:
        """Trains a step in a few milliseconds on a CPU."""
        return cls(vocab=256, hidden=32, layers=1, heads=2, seq=16, mlp_hidden=64)

    @classmethod
    def small(cls) -> ModelConfig:
        """Big enough on a GPU for Zipf-frequent rows to take thousands of contributions."""
        return cls(vocab=8192, hidden=256, layers=4, heads=8, seq=128, mlp_hidden=704)


_NORMS = ("attention_norm", "mlp_norm", "final_norm")
_RESIDUAL_OUTPUTS = ("o", "down")


def _block_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    hidden, mlp = config.hidden, config.mlp_hidden
    return {
        "attention_norm": (hidden,),
        "q": (hidden, hidden),
        "k": (hidden, hidden),
        "v": (hidden, hidden),
        "o": (hidden, hidden),
        "mlp_norm": (hidden,),
        "gate": (hidden, mlp),
        "up": (hidden, mlp),
        "down": (mlp, hidden),
    }


def _parameter_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    # Projections are stored [in, out], so every matmul slot call is x @ W with no transpose.
    shapes: dict[str, tuple[int, ...]] = {
        "embedding": (config.vocab, config.hidden),
        "final_norm": (config.hidden,),
    }
    if not config.tied:
        shapes["lm_head"] = (config.hidden, config.vocab)
    for layer in range(config.layers):
        for name, shape in _block_shapes(config).items():
            shapes[f"layers.{layer}.{name}"] = shape
    return shapes


def init_parameters(config: ModelConfig, seed: int) -> dict[str, torch.Tensor]:
    """Initial parameters, float32 on the CPU, the same bits on every machine for one seed.

    Matrices are Normal(0, 0.02), the residual outputs (o, down) scaled by 1/sqrt(2 * layers);
    norm weights are ones. Keys are the names `TinyDecoder.named_parameters()` gives.
    """
    return {name: p.clone() for name, p in _initial(config, seed).items()}


@functools.lru_cache(maxsize=4)
def _initial(config: ModelConfig, seed: int) -> Mapping[str, torch.Tensor]:
    """`init_parameters`, drawn once per model and seed (every run of an experiment starts from
    them); read-only to callers, who copy."""
    generator = torch.Generator().manual_seed(seed)
    parameters: dict[str, torch.Tensor] = {}
    for name, shape in _parameter_shapes(config).items():
        leaf = name.rsplit(".", 1)[-1]
        if leaf in _NORMS:
            parameters[name] = torch.ones(shape)
            continue
        std = INIT_STD / math.sqrt(2 * config.layers) if leaf in _RESIDUAL_OUTPUTS else INIT_STD
        # Drawn in float64: torch's float32 normal draw has a CPU-feature-specific vectorised
        # path, which would make the bits depend on the machine.
        draw = torch.randn(shape, generator=generator, dtype=torch.float64)
        parameters[name] = draw.mul_(std).to(torch.float32)
    return MappingProxyType(parameters)


def rope_tables(
    length: int, head_dim: int, dtype: torch.dtype, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, each [length, head_dim // 2], of the rotary angles of positions 0..length-1."""
    position = torch.arange(length, dtype=torch.float64, device=device)
    pair = torch.arange(head_dim // 2, dtype=torch.float64, device=device)
    angle = position.unsqueeze(-1) * ROPE_BASE ** (-2 * pair / head_dim)
    return angle.cos().to(dtype), angle.sin().to(dtype)


class _Embedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, ids: torch.Tensor, slots: Slots) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.slots, ctx.num_embeddings = slots, weight.shape[0]
        return slots.call("embedding_forward", weight, ids)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None
        (ids,) = ctx.saved_tensors
        grad = ctx.slots.call("embedding_backward", grad_out.contiguous(), ids, ctx.num_embeddings)
        return grad, None, None


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, slots: Slots) -> torch.Tensor:
        ctx.save_for_backward(x, weight, rmsnorm_rstd(x, RMSNORM_EPS))
        ctx.slots = slots
        return slots.call("rmsnorm_forward", x, weight, RMSNORM_EPS)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, weight, rstd = ctx.saved_tensors
        grad_x, grad_weight = ctx.slots.call(
            "rmsnorm_backward", grad_out.contiguous(), x, weight, rstd
        )
        return grad_x, grad_weight, None


class _Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, slots: Slots) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        ctx.slots = slots
        return slots.call("matmul", a, b)

    @staticmethod
    def backward(
        ctx: Any, grad_c: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        a, b = ctx.saved_tensors
        grad_c = grad_c.contiguous()
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = ctx.slots.call("matmul", grad_c, b.t().contiguous())
        if ctx.needs_input_grad[1]:
            grad_b = ctx.slots.call("matmul", a.t().contiguous(), grad_c)
        return grad_a, grad_b, None


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slots: Slots
    ) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        ctx.slots = slots
        return slots.call("rope", x, cos, sin)

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        cos, sin = ctx.saved_tensors
        # A rotation's transpose is the rotation by the opposite angle.
        return ctx.slots.call("rope", grad_y.contiguous(), cos, -sin), None, None, None


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, slots: Slots) -> torch.Tensor:
        y = slots.call("softmax", x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor, None]:
        (y,) = ctx.saved_tensors
        return y * (grad_y - (grad_y * y).sum(-1, keepdim=True)), None


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor, slots: Slots) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return slots.call("swiglu", gate, up)

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        gate, up = ctx.saved_tensors
        sigmoid = torch.sigmoid(gate)
        silu = gate * sigmoid
        grad_silu = sigmoid * (1 + gate * (1 - sigmoid))
        return grad_y * up * grad_silu, grad_y * silu, None


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, logits: torch.Tensor, targets: torch.Tensor, slots: Slots
    ) -> torch.Tensor:
        ctx.save_for_backward(logits, targets)
        ctx.slots = slots
        return slots.call("cross_entropy_forward", logits, targets)

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        logits, targets = ctx.saved_tensors
        # The mean's gradient arrives as a stride-0 expansion; a kernel gets real memory.
        grad = ctx.slots.call("cross_entropy_backward", grad_loss.contiguous(), logits, targets)
        return grad, None, None


def _split_heads(x: torch.Tensor, batch: int, heads: int) -> torch.Tensor:
    """[batch * seq, hidden] -> [batch * heads, seq, head_dim], contiguous."""
    rows, hidden = x.shape
    length = rows // batch
    split = x.view(batch, length, heads, hidden // heads).transpose(1, 2)
    return split.reshape(batch * heads, length, hidden // heads)


def _merge_heads(x: torch.Tensor, batch: int) -> torch.Tensor:
    """[batch * heads, seq, head_dim] -> [batch * seq, hidden], contiguous."""
    rows, length, head_dim = x.shape
    heads = rows // batch
    merged = x.view(batch, heads, length, head_dim).transpose(1, 2)
    return merged.reshape(batch * length, heads * head_dim)


def _unset(shape: tuple[int, ...]) -> nn.Parameter:
    """A float32 parameter, whatever torch's default dtype is at the moment: a model is built
    in one thread while the reference runs promoted to float64 in another
    (`loop._REFERENCE_RUNS`)."""
    return nn.Parameter(torch.empty(shape, dtype=torch.float32))


class _Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.heads = config.heads
        for name, shape in _block_shapes(config).items():
            self.register_parameter(name, _unset(shape))

    def forward(
        self,
        h: torch.Tensor,
        batch: int,
        rope: tuple[torch.Tensor, torch.Tensor],
        slots: Slots,
    ) -> torch.Tensor:
        x = _RMSNorm.apply(h, self.attention_norm, slots)
        q, k, v = (_Matmul.apply(x, w, slots) for w in (self.q, self.k, self.v))
        q = _Rope.apply(_split_heads(q, batch, self.heads), *rope, slots)
        k = _Rope.apply(_split_heads(k, batch, self.heads), *rope, slots)
        v = _split_heads(v, batch, self.heads)
        rows, length, head_dim = q.shape
        scores = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(head_dim)
        causal = torch.ones(length, length, dtype=torch.bool, device=h.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        probabilities = _Softmax.apply(scores.reshape(rows * length, length), slots)
        attended = torch.matmul(probabilities.view(rows, length, length), v)
        h = h + _Matmul.apply(_merge_heads(attended, batch), self.o, slots)

        x = _RMSNorm.apply(h, self.mlp_norm, slots)
        gate = _Matmul.apply(x, self.gate, slots)
        up = _Matmul.apply(x, self.up, slots)
        return h + _Matmul.apply(_SwiGLU.apply(gate, up, slots), self.down, slots)


class TinyDecoder(nn.Module):
    """The training check's model, its parameters set by `init_parameters(config, seed)`.

    Float32 as built; `.to(device)` moves it. Every slot call goes through `slots`, so
    `slots.calls` counts them and `slots.plug` decides which run the candidate.
    """

    def __init__(self, config: ModelConfig, slots: Slots, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        self.slots = slots
        shapes = _parameter_shapes(config)
        self.embedding = _unset(shapes["embedding"])
        self.final_norm = _unset(shapes["final_norm"])
        self.lm_head = None if config.tied else _unset(shapes["lm_head"])
        self.layers = nn.ModuleList(_Block(config) for _ in range(config.layers))
        self.load_state_dict(_initial(config, seed))  # copied into the parameters

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of predicting tokens[:, 1:] from tokens[:, :-1].

        tokens: int64 [batch, length + 1], length at most `config.seq`.
        """
        if tokens.dim() != 2 or not 2 <= tokens.shape[1] <= self.config.seq + 1:
            raise UsageError(
                f"the model takes tokens of shape [batch, length + 1] with length from 1 to "
                f"seq={self.config.seq}, got shape {list(tokens.shape)}; cut windows of at "
                f"most {self.config.seq + 1} tokens"
            )
        batch, length = tokens.shape[0], tokens.shape[1] - 1
        inputs = tokens[:, :-1].reshape(-1)
        targets = tokens[:, 1:].reshape(-1)
        h = _Embedding.apply(self.embedding, inputs, self.slots)
        rope = rope_tables(length, self.config.head_dim, h.dtype, h.device)
        for block in self.layers:
            h = block(h, batch, rope, self.slots)
        h = _RMSNorm.apply(h, self.final_norm, self.slots)
        head = self.embedding.t().contiguous() if self.lm_head is None else self.lm_head
        logits = _Matmul.apply(h, head, self.slots)
        return _CrossEntropy.apply(logits, targets, self.slots).mean()
