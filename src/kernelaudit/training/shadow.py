"""Shadowing runs: the reference's correctly rounded trajectory followed step by step, with the
gradient a plug in the slot would give taken at every step, so that what a plug's results do
to the updates is measured free of the chaos that makes free-running runs part
(`kernelaudit.training.loop` trains those)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from kernelaudit.training.loop import Experiment
from kernelaudit.training.model import TinyDecoder
from kernelaudit.training.slots import BACKWARD_SLOTS, Plug, Slots, failure_text


@dataclass(frozen=True)
class Shadowed:
    """A plug shadowing the reference's run: the difference its gradients make to the updates
    along the reference's own trajectory, free of the chaos that makes free-running runs part."""

    optimizer: str
    drift: Mapping[str, torch.Tensor] = field(default_factory=dict)
    """Per parameter: the sum over steps of (update from the plug's gradient) - (update from the
    reference's), float64 on the CPU."""
    slot_calls: int = 0
    """Steps in which the plug ran."""
    error: str = ""


_BETAS = (0.9, 0.999)
_ADAM_EPS = 1e-8
"""torch.optim.AdamW's defaults, which `train` uses."""


class _Updates:
    """The gradient part of one optimizer's update, with its own state: SGD's lr * g, or AdamW's
    lr * m_hat / (sqrt(v_hat) + eps) (weight decay acts on the parameters, not the gradient,
    and is the same for every gradient)."""

    def __init__(self, experiment: Experiment, optimizer: str) -> None:
        self.optimizer = optimizer
        self.lr = experiment.sgd_lr if optimizer == "sgd" else experiment.adamw_lr
        self.moments: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.steps = 0

    def __call__(self, gradients: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        # One fused launch per operation over every parameter (`torch._foreach_*`), each the
        # same float64 arithmetic, in the same order, as the per-parameter formula.
        names = list(gradients)
        g = [gradients[n].double() for n in names]
        if self.optimizer == "sgd":
            return dict(zip(names, torch._foreach_mul(g, self.lr), strict=True))
        self.steps += 1
        b1, b2 = _BETAS
        if not self.moments:
            self.moments = {
                n: (torch.zeros_like(t), torch.zeros_like(t)) for n, t in zip(names, g, strict=True)
            }
        m = [self.moments[n][0] for n in names]
        v = [self.moments[n][1] for n in names]
        m = torch._foreach_add(torch._foreach_mul(m, b1), torch._foreach_mul(g, 1 - b1))
        v = torch._foreach_add(
            torch._foreach_mul(v, b2), torch._foreach_mul(torch._foreach_mul(g, 1 - b2), g)
        )
        self.moments = {n: (m_n, v_n) for n, m_n, v_n in zip(names, m, v, strict=True)}
        m_hat = torch._foreach_div(m, 1 - b1**self.steps)
        v_hat = torch._foreach_div(v, 1 - b2**self.steps)
        denominators = torch._foreach_add(torch._foreach_sqrt(v_hat), _ADAM_EPS)
        updates = torch._foreach_div(torch._foreach_mul(m_hat, self.lr), denominators)
        return dict(zip(names, updates, strict=True))


def _gradients(
    model: TinyDecoder, batch: torch.Tensor, loss: torch.Tensor | None = None, keep: bool = False
) -> dict[str, torch.Tensor]:
    """Every parameter's gradient at `batch`: from a forward pass of its own, or through
    `loss`, a forward pass already made (its graph kept for later backward passes if `keep`)."""
    model.zero_grad(set_to_none=True)
    if loss is None:
        loss = model(batch)
    loss.backward(retain_graph=keep)
    return {
        n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
        for n, p in model.named_parameters()
    }


def shadow(
    experiment: Experiment,
    optimizer: str,
    reference: Plug,
    plug: Plug,
    tokens: torch.Tensor,
    device: str,
) -> Shadowed:
    """Train with `reference` in the slot and, at every step, also take the gradient with `plug`
    in it at the same parameters and batch. Each gradient feeds an optimizer state of its own;
    the differences of their updates are summed per parameter. The training check passes the
    correctly rounded slot (`Rounded`) as `reference`: the centre every kernel's drift, the
    native reference's included, is measured from.

    A kernel whose error is biased (a hot row's gradient summed in bf16 always loses the same
    way) drifts in proportion to the steps; rounding noise of either sign only as their square
    root. Free-running runs cannot tell them apart once a ulp has been amplified into a
    different trajectory.
    """
    return shadow_all(experiment, optimizer, reference, (plug,), tokens, device)[0]


def shadow_all(
    experiment: Experiment,
    optimizer: str,
    reference: Plug,
    plugs: Sequence[Plug],
    tokens: torch.Tensor,
    device: str,
    share_forward: bool = True,
) -> list[Shadowed]:
    """`shadow` for several plugs along one run of the reference's trajectory: the same results
    as shadowing each alone (each plug keeps its own optimizer state and call count), for one
    reference gradient per step instead of one per plug. A plug that raises stops being asked;
    the others go on.

    Every gradient of a step is taken at the same parameters and batch, so where the plugged
    slot runs in the backward pass only (an embedding's, a norm's or a loss's backward), the
    forward pass is the same for every plug: it is made once per step and each plug's backward
    pass runs through it (its arguments copied, so a plug that writes into them cannot reach the
    next one's). The results are the same, bit for bit, as with a forward pass per plug, which
    `share_forward=False` makes, as does a slot the forward pass runs."""
    torch.manual_seed(experiment.seed)
    slots = Slots(reference)
    model = TinyDecoder(experiment.config, slots, seed=experiment.seed).to(device)
    driven = _Updates(experiment, optimizer)
    shadowing = [_Updates(experiment, optimizer) for _ in plugs]
    names = [n for n, _ in model.named_parameters()]
    parameters = list(model.parameters())
    # summed where the model is, read back once at the end
    drifts = [
        [torch.zeros(p.shape, dtype=torch.float64, device=p.device) for p in parameters]
        for _ in plugs
    ]
    calls = [0] * len(plugs)
    errors = [""] * len(plugs)
    shared = share_forward and all(p.slot in BACKWARD_SLOTS for p in (reference, *plugs))
    slots.copies_arguments = shared
    for batch in tokens.to(device):
        loss = _shared_forward(model, slots, reference, batch) if shared else None
        taken: dict[int, dict[str, torch.Tensor]] = {}
        for k, plug in enumerate(plugs):
            if errors[k]:
                continue
            slots.plug = plug
            before = slots.calls[plug.slot]
            try:
                taken[k] = _gradients(model, batch, loss, keep=shared)
            except Exception as failure:  # the plugged kernel's failure, reported by the check
                errors[k] = f"step {calls[k]}: {failure_text(failure)}"
                continue
            calls[k] += 1 if slots.calls[plug.slot] > before else 0
        if not taken:
            break
        slots.plug = reference
        ours = driven(_gradients(model, batch, loss))
        driving = [ours[n] for n in names]
        for k, gradients in taken.items():
            theirs = shadowing[k](gradients)
            torch._foreach_add_(drifts[k], torch._foreach_sub([theirs[n] for n in names], driving))
        with torch.no_grad():
            if optimizer == "adamw":
                torch._foreach_mul_(parameters, 1 - experiment.adamw_lr * experiment.weight_decay)
            torch._foreach_sub_(
                parameters, [u.to(p.dtype) for u, p in zip(driving, parameters, strict=True)]
            )
    return [
        Shadowed(
            optimizer,
            {} if errors[k] else {n: d.cpu() for n, d in zip(names, drifts[k], strict=True)},
            calls[k],
            errors[k],
        )
        for k in range(len(plugs))
    ]


def _shared_forward(
    model: TinyDecoder, slots: Slots, reference: Plug, batch: torch.Tensor
) -> torch.Tensor:
    """The loss of one forward pass at `batch`, to be shared by the backward passes of every
    plug of the step: the plugged slots run in the backward pass only, so no plug changes it."""
    slots.plug = reference
    before = slots.calls[reference.slot]
    loss = model(batch)
    assert slots.calls[reference.slot] == before, f"{reference.slot} ran in the forward pass"
    return loss
