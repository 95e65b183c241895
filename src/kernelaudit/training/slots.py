"""The operations of the training check's model that a candidate can be plugged into.

Every slot has one positional call signature, which a problem wired to the slot declares its
inputs in (`kernelaudit.problem.spec.SLOTS` names the arguments):

    embedding_forward(weight[vocab, hidden], ids[tokens] int64) -> out[tokens, hidden]
    embedding_backward(grad_out[tokens, hidden], ids[tokens] int64, num_embeddings: int)
        -> grad_weight[num_embeddings, hidden]
    rmsnorm_forward(x[rows, hidden], weight[hidden], eps: float) -> y[rows, hidden]
        y = x * rsqrt(mean(x^2, -1) + eps) * weight
    rmsnorm_backward(grad_out[rows, hidden], x[rows, hidden], weight[hidden], rstd[rows])
        -> (grad_x[rows, hidden], grad_weight[hidden]); rstd = rsqrt(mean(x^2, -1) + eps)
    softmax(x[rows, cols]) -> y[rows, cols]  over the last dim; x may hold -inf where masked
    cross_entropy_forward(logits[rows, vocab], targets[rows] int64) -> loss[rows]
    cross_entropy_backward(grad_loss[rows], logits[rows, vocab], targets[rows] int64)
        -> grad_logits[rows, vocab]
    matmul(a[m, k], b[k, n]) -> c[m, n]
    rope(x[rows, seq, head_dim], cos[seq, head_dim // 2], sin[seq, head_dim // 2]) -> y
        rotate-half pairs: y1 = x1 * cos - x2 * sin, y2 = x1 * sin + x2 * cos, where x1 and x2
        are the first and second half of the last dim
    swiglu(gate[rows, hidden], up[rows, hidden]) -> silu(gate) * up

`REFERENCES` holds a plain-torch implementation of each, which the model uses wherever no
candidate is plugged in. `Slots` routes each call of the model to the plugged candidate or to
the reference, counts the calls so a check can confirm the candidate really ran, and refuses a
result whose number, shapes, dtypes or device are not those the slot declares for the call
(`declared_results`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F

from kernelaudit.errors import UsageError
from kernelaudit.problem.spec import SLOTS


def _accumulation(tensor: torch.Tensor) -> torch.dtype:
    # At least float32, so half-precision inputs reduce in fp32 and a float64 model stays exact.
    return torch.promote_types(tensor.dtype, torch.float32)


def rmsnorm_rstd(x: torch.Tensor, eps: float) -> torch.Tensor:
    """rsqrt(mean(x^2, -1) + eps) per row, in float32 (float64 for a float64 `x`): the tensor an
    RMSNorm forward saves for its backward."""
    wide = x.to(_accumulation(x))
    return torch.rsqrt(wide.square().mean(-1) + eps)


def _embedding_forward(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return weight.index_select(0, ids)


def _embedding_backward(
    grad_out: torch.Tensor, ids: torch.Tensor, num_embeddings: int
) -> torch.Tensor:
    # torch's dense embedding backward is deterministic on CUDA too (it sorts the ids), unlike
    # index_add_, whose atomics would make the reference's own runs disagree with each other.
    wide = grad_out.to(_accumulation(grad_out))
    grad = torch.ops.aten.embedding_dense_backward(wide, ids, num_embeddings, -1, False)
    return grad.to(grad_out.dtype)


def _rmsnorm_forward(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    wide = _accumulation(x)
    y = x.to(wide) * rmsnorm_rstd(x, eps).unsqueeze(-1) * weight.to(wide)
    return y.to(x.dtype)


def _rmsnorm_backward(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    wide = _accumulation(x)
    rstd = rstd.to(wide).unsqueeze(-1)
    normed = x.to(wide) * rstd
    grad = grad_out.to(wide)
    grad_normed = grad * weight.to(wide)
    grad_x = rstd * (grad_normed - normed * (grad_normed * normed).mean(-1, keepdim=True))
    grad_weight = (grad * normed).reshape(-1, x.shape[-1]).sum(0)
    return grad_x.to(x.dtype), grad_weight.to(weight.dtype)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.to(_accumulation(x)), -1).to(x.dtype)


def _cross_entropy_forward(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.to(_accumulation(logits)), targets, reduction="none")


def _cross_entropy_backward(
    grad_loss: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    wide = _accumulation(logits)
    grad = torch.softmax(logits.to(wide), -1)
    rows = torch.arange(grad.shape[0], device=grad.device)
    # One target per row: no two writes meet, so this stays deterministic on every device.
    grad[rows, targets] -= 1
    return (grad * grad_loss.to(wide).unsqueeze(-1)).to(logits.dtype)


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    wide = _accumulation(a)
    return torch.matmul(a.to(wide), b.to(wide)).to(a.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    wide = _accumulation(x)
    first, second = x.to(wide).chunk(2, -1)
    cos, sin = cos.to(wide), sin.to(wide)
    y = torch.cat((first * cos - second * sin, first * sin + second * cos), -1)
    return y.to(x.dtype)


def _swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    wide = _accumulation(gate)
    return (F.silu(gate.to(wide)) * up.to(wide)).to(gate.dtype)


REFERENCES: Mapping[str, Callable[..., object]] = MappingProxyType(
    {
        "embedding_forward": _embedding_forward,
        "embedding_backward": _embedding_backward,
        "rmsnorm_forward": _rmsnorm_forward,
        "rmsnorm_backward": _rmsnorm_backward,
        "softmax": _softmax,
        "cross_entropy_forward": _cross_entropy_forward,
        "cross_entropy_backward": _cross_entropy_backward,
        "matmul": _matmul,
        "rope": _rope,
        "swiglu": _swiglu,
    }
)
"""Plain-torch implementation of every slot: reductions in at least float32, results in the
input's dtype (rmsnorm_backward's grad_weight in weight's dtype, cross_entropy_forward's loss in
at least float32)."""


BACKWARD_SLOTS: frozenset[str] = frozenset(
    {"embedding_backward", "rmsnorm_backward", "cross_entropy_backward"}
)
"""The slots the model calls in its backward pass only (`kernelaudit.training.model`)."""


@dataclass(frozen=True)
class Result:
    """One tensor a slot returns, as the auditor knows it before the call: its shape and dtype."""

    shape: tuple[int, ...]
    dtype: torch.dtype


def _like(tensor: torch.Tensor) -> Result:
    return Result(tuple(tensor.shape), tensor.dtype)


_RESULTS: Mapping[str, Callable[..., tuple[Result, ...]]] = MappingProxyType(
    {
        "embedding_forward": lambda weight, ids: (
            Result((ids.shape[0], weight.shape[1]), weight.dtype),
        ),
        "embedding_backward": lambda grad_out, ids, n: (
            Result((n, grad_out.shape[1]), grad_out.dtype),
        ),
        "rmsnorm_forward": lambda x, weight, eps: (_like(x),),
        "rmsnorm_backward": lambda g, x, weight, rstd: (_like(x), _like(weight)),
        "softmax": lambda x: (_like(x),),
        "cross_entropy_forward": lambda logits, targets: (
            Result((logits.shape[0],), _accumulation(logits)),
        ),
        "cross_entropy_backward": lambda g, logits, targets: (_like(logits),),
        "matmul": lambda a, b: (Result((a.shape[0], b.shape[1]), a.dtype),),
        "rope": lambda x, cos, sin: (_like(x),),
        "swiglu": lambda gate, up: (_like(gate),),
    }
)


def declared_results(slot: str, arguments: Sequence[object]) -> tuple[Result, ...]:
    """What `slot` returns for `arguments` as the plugged function gets them (after the plug's
    casts): the shapes follow from the arguments' sizes, the dtypes are those `REFERENCES`
    returns."""
    if slot not in _RESULTS:
        raise _unknown_slot(slot)
    return _RESULTS[slot](*arguments)


def _unknown_slot(slot: str) -> UsageError:
    return UsageError(
        f"unknown slot {slot!r}; the training check's model has these slots: "
        f"{', '.join(SLOTS)}. Name one of them"
    )


@dataclass(frozen=True)
class Plug:
    """A candidate put into one slot of the model.

    dtypes: one entry per positional argument of the slot (`SLOTS[slot]`). A floating
        tensor argument is cast to its floating entry before the call, an integer tensor to its
        integer entry (ids declared int32 reach the candidate as int32); None, and every Python
        scalar, is passed as the model has it. The candidate's results are cast back to the
        model's dtype.
    """

    slot: str
    function: Callable[..., object]
    dtypes: tuple[torch.dtype | None, ...]

    def __post_init__(self) -> None:
        if self.slot not in SLOTS:
            raise _unknown_slot(self.slot)
        if not callable(self.function):
            raise UsageError(
                f"the plug for slot {self.slot!r} got {type(self.function).__name__} as its "
                "function; give the candidate kernel itself, a callable"
            )
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        arguments = SLOTS[self.slot]
        if len(self.dtypes) != len(arguments):
            raise UsageError(
                f"the plug for slot {self.slot!r} declares {len(self.dtypes)} dtypes, but the "
                f"slot takes {len(arguments)} arguments ({', '.join(arguments)}); give one "
                "dtype per argument, None for those passed as they are"
            )
        for name, dtype in zip(arguments, self.dtypes, strict=True):
            if dtype is not None and not isinstance(dtype, torch.dtype):
                raise UsageError(
                    f"the plug for slot {self.slot!r} declares {dtype!r} as the dtype of "
                    f"argument {name!r}; give a torch.dtype or None"
                )


def _cast(argument: object, dtype: torch.dtype | None) -> object:
    if not isinstance(argument, torch.Tensor):
        return argument
    if dtype is not None and argument.is_floating_point() == dtype.is_floating_point:
        argument = argument.to(dtype)
    # Layout is the layouts check's business; here the candidate gets what real code hands it.
    return argument.contiguous()


def describe(value: object) -> str:
    """What a plugged function returned, in words, for a message."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {list(value.shape)} on {value.device}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}: {', '.join(map(describe, value))}"
    return f"a {type(value).__name__}"


def wrong_result(
    slot: str, described: str, declared: Sequence[Result], device: torch.device
) -> RuntimeError:
    """The error for a plugged function whose result is not what the slot declares."""
    wanted = " and ".join(f"a {r.dtype} tensor of shape {list(r.shape)}" for r in declared)
    return RuntimeError(
        f"the candidate in slot {slot!r} returned {described}; the slot expects {wanted} "
        f"on {device}"
    )


def _checked_results(
    slot: str, result: object, declared: tuple[Result, ...], device: torch.device
) -> tuple[torch.Tensor, ...]:
    results = (result,) if len(declared) == 1 else result
    if (
        not isinstance(results, (tuple, list))
        or len(results) != len(declared)
        or not all(
            isinstance(r, torch.Tensor)
            and tuple(r.shape) == d.shape
            and r.dtype == d.dtype
            and r.device == device
            for r, d in zip(results, declared, strict=True)
        )
    ):
        raise wrong_result(slot, describe(result), declared, device)
    return tuple(results)


class PlugRaised(Exception):
    """A plugged function that runs in another process raised there; the message names the
    exception as it was raised."""


def failure_text(failure: Exception) -> str:
    """A plugged function's failure, for a run's error: "<Type>: <message>"."""
    if isinstance(failure, PlugRaised):
        return str(failure)
    return f"{type(failure).__name__}: {failure}"


class Slots:
    """Routes every slot call of the model: to the plug for its slot, with its casts, and to the
    reference otherwise. `calls` counts the calls of each slot, plugged or not."""

    def __init__(self, plug: Plug | None = None) -> None:
        self.plug = plug
        self.calls: dict[str, int] = dict.fromkeys(SLOTS, 0)
        self.copies_arguments = False
        """Whether the plug gets copies of its tensor arguments: set while several plugs'
        backward passes run through one forward pass, whose saved tensors they all read."""

    def call(self, slot: str, *arguments: object) -> Any:
        """Run `slot` on positional `arguments`; rmsnorm_backward gives a tuple of two."""
        if slot not in REFERENCES:
            raise _unknown_slot(slot)
        self.calls[slot] += 1
        if self.plug is None or self.plug.slot != slot:
            return REFERENCES[slot](*arguments)
        tensors = [a for a in arguments if isinstance(a, torch.Tensor)]
        model_dtype = next(t.dtype for t in tensors if t.is_floating_point())
        cast = [_cast(a, d) for a, d in zip(arguments, self.plug.dtypes, strict=True)]
        if self.copies_arguments:
            cast = [
                c.clone() if isinstance(c, torch.Tensor) and c is a else c
                for c, a in zip(cast, arguments, strict=True)
            ]
        result = self.plug.function(*cast)
        declared = declared_results(slot, cast)
        results = _checked_results(slot, result, declared, tensors[0].device)
        # A copy, so a function that returns (or later writes) one of its inputs cannot alias
        # the model's own tensors.
        back = tuple(
            r.to(dtype=model_dtype, memory_format=torch.contiguous_format, copy=True)
            for r in results
        )
        return back if len(back) > 1 else back[0]
