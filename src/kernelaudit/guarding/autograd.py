"""A differentiable function guarded forward and backward in one step.

    op = kernelaudit.guard_autograd(MyFunction.apply, reference, sample=0.01)

`op` is called as `MyFunction.apply` is (tensors by position) and is differentiated as it is:
its forward is `MyFunction`'s forward, its backward `MyFunction`'s backward. On the calls the
sampler picks, the forward's outputs are judged against `reference` (a plain differentiable
torch function of the same inputs), and, when the backward runs, the gradients the function
gives its floating inputs are judged against the reference's own, by autograd in float64, for
the same upstream gradients. The two are two guards (`forward`, `backward`) with a summary
each; the backward is checked on the calls whose forward was chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from kernelaudit.guarding.guard import Guard
from kernelaudit.guarding.judged import copied, results


class GuardedFunction:
    """See the module's text."""

    def __init__(
        self, function: Callable[..., object], reference: Callable[..., object], **options: Any
    ) -> None:
        if not callable(function) or not callable(reference):
            raise TypeError(
                "guard_autograd() takes the differentiable function (MyFunction.apply) and a "
                "plain torch reference of the same inputs"
            )
        name = options.pop("name", None) or getattr(function, "__qualname__", "function")
        self.function = function
        self.forward = Guard(function, reference, name=f"{name} forward", **options)
        self.backward = Guard(
            _not_called, _Gradients(reference), name=f"{name} backward", **options
        )
        # its records hold the call's inputs and upstream gradients, but no kernel to run again
        self.backward.replayable = False

    def __call__(self, *inputs: object) -> object:
        returned = _Apply.apply(self, *inputs)
        return returned[0] if len(returned) == 1 and not self._many else returned

    _many = False
    """Whether the function returns a tuple (set by its first call)."""

    def flush(self) -> tuple[Any, Any]:
        """Both guards' summaries, once their checks queued so far are done."""
        return self.forward.flush(), self.backward.flush()

    def close(self) -> None:
        self.forward.close()
        self.backward.close()


class _Apply(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, owner: GuardedFunction, *inputs: object) -> tuple[torch.Tensor, ...]:
        call, why = owner.forward.choose(inputs)
        if why is not None and owner.forward.oversized(inputs):
            why = None
        kept = tuple(copied(x) for x in inputs) if why is not None else ()
        with torch.enable_grad():
            leaves = tuple(_leaf(x) for x in inputs)
            returned = owner.function(*leaves)
        outputs = results(returned)
        owner._many = isinstance(returned, (tuple, list))
        if why is not None:
            owner.forward.submit(call, why, kept, outputs)
        ctx.owner, ctx.call, ctx.why, ctx.kept = owner, call, why, kept
        ctx.leaves, ctx.outputs = leaves, outputs
        ctx.mark_non_differentiable(*(o for o in outputs if not o.is_floating_point()))
        return tuple(o.detach() for o in outputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        owner: GuardedFunction = ctx.owner
        owner.backward.counted()
        wanted = [i for i, leaf in enumerate(ctx.leaves) if _differentiable(leaf)]
        upstream = [
            g if g is not None else torch.zeros_like(o)
            for g, o in zip(grads, ctx.outputs, strict=True)
        ]
        floating = [(o, g) for o, g in zip(ctx.outputs, upstream, strict=True) if o.requires_grad]
        got = torch.autograd.grad(
            [o for o, _ in floating],
            [ctx.leaves[i] for i in wanted],
            [g for _, g in floating],
            allow_unused=True,
        )
        gradients = [
            g if g is not None else torch.zeros_like(ctx.leaves[i])
            for g, i in zip(got, wanted, strict=True)
        ]
        if ctx.why is not None and gradients:
            given = (tuple(wanted), len(ctx.kept), *ctx.kept)
            arguments = (*given, *(copied(g) for _, g in floating))
            owner.backward.submit(ctx.call, ctx.why, arguments, gradients)
        returned: list[torch.Tensor | None] = [None] * len(ctx.leaves)
        for i, gradient in zip(wanted, gradients, strict=True):
            returned[i] = gradient
        return (None, *returned)


class _Gradients:
    """The reference's gradients, for a backward check's arguments: the positions of the
    inputs the function gave gradients for, how many inputs there are, the inputs, then the
    upstream gradient of each floating output. What the guarded backward is judged against."""

    def __init__(self, reference: Callable[..., object]) -> None:
        self.reference = reference

    def __call__(
        self, wanted: Sequence[int], count: int, *arguments: object
    ) -> tuple[torch.Tensor, ...]:
        inputs, upstream = arguments[:count], arguments[count:]
        with torch.enable_grad():
            leaves = tuple(_leaf(x, i in wanted) for i, x in enumerate(inputs))
            outputs = [o for o in results(self.reference(*leaves)) if o.is_floating_point()]
            chosen = [leaves[i] for i in wanted]
            got = torch.autograd.grad(outputs, chosen, list(upstream), allow_unused=True)
        return tuple(
            g if g is not None else torch.zeros_like(leaf)
            for g, leaf in zip(got, chosen, strict=True)
        )


def _leaf(value: object, grad: bool | None = None) -> object:
    """A tensor detached from the caller's graph, requiring gradients where the caller's did
    (or where `grad` says); any other value as it is."""
    if not isinstance(value, torch.Tensor):
        return value
    wants = value.requires_grad if grad is None else grad
    return value.detach().requires_grad_(wants and value.is_floating_point())


def _differentiable(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.requires_grad


def _not_called(*arguments: object) -> object:
    raise AssertionError("a backward guard is handed its gradients; it never calls a kernel")


def guard_autograd(
    function: Callable[..., object], reference: Callable[..., object], **options: Any
) -> GuardedFunction:
    """`function` (a `torch.autograd.Function`'s `apply`, or any differentiable callable)
    guarded forward and backward against the plain torch `reference`; see the module."""
    return GuardedFunction(function, reference, **options)
