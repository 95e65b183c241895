"""The buffers one call runs on: fresh guarded copies of its inputs and poisoned, guarded
output slots, or an earlier call's buffers with new values written in; and what is read out
of them after the call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from kernelaudit.host_copies import host_copy
from kernelaudit.runner.boundary.arena import Arena
from kernelaudit.runner.boundary.failures import CandidateFailure
from kernelaudit.runner.boundary.guard import (
    GuardedTensor,
    allocate,
    breach,
    contiguous_geometry,
    place,
)
from kernelaudit.runner.boundary.messages import Call, GuardBreach, OutputSlot, Placement, TensorArg
from kernelaudit.runner.boundary.poison import fill_poison, poison_value
from kernelaudit.runner.worker.staging import Staged


@dataclass
class Placed:
    """The buffers one call ran on, kept while a later call of the invocation reuses them."""

    inputs: dict[int, GuardedTensor]
    slots: list[GuardedTensor]
    repeats: list[list[GuardedTensor]] = field(default_factory=list)
    """The buffers each repetition of the call (`Call.repeat`) left its results in."""

    def placements(self, call: int) -> list[Placement]:
        """Where the buffers taken from an arena went."""
        every = (*self.inputs.values(), *self.slots, *(g for r in self.repeats for g in r))
        return [Placement(g.label, call, g.offset, g.phase) for g in every if g.offset >= 0]


def buffers_for(
    call: Call,
    device: torch.device,
    placed: dict[int, Placed],
    arena: Arena | None = None,
    staged: Staged | None = None,
) -> Placed:
    """Fresh guarded buffers for the call's tensors (taken from `arena` where there is one),
    or the buffers of the call it reuses with this call's values written in: through an
    alias, so the tensors the candidate sees keep their identity, address and version
    counter; or, for an update (`Call.updated`), in place, so their version counters move as
    after an optimizer's step. The values are copied from their device copies in `staged`
    where it holds them."""

    def values(arg: TensorArg) -> torch.Tensor:
        return staged.on_device(arg.values) if staged is not None else arg.values

    if call.reuse is not None and call.reuse in placed:
        earlier = placed[call.reuse]
        for position, arg in enumerate(call.args):
            if isinstance(arg, TensorArg) and position in earlier.inputs:
                view = earlier.inputs[position].view
                if call.updated:
                    with torch.no_grad():  # as an optimizer's step: the counter moves
                        view.copy_(values(arg).to(view.device).expand(view.shape))
                else:
                    rewrite(view, values(arg))
        for slot in earlier.slots:
            value = poison_value(call.poison, slot.view.dtype, call.sentinel)
            rewrite(slot.view, torch.full((), value))
        return earlier
    inputs = {
        position: place(f"input {position}", values(arg), arg.layout, device, arena)
        for position, arg in enumerate(call.args)
        if isinstance(arg, TensorArg)
    }
    return Placed(inputs, output_buffers(call, call.slots, "output", device, arena))


def output_buffers(
    call: Call,
    slots: Sequence[OutputSlot],
    label: str,
    device: torch.device,
    arena: Arena | None = None,
) -> list[GuardedTensor]:
    """Fresh guarded, poisoned buffers for `slots`, labelled "`label` k"."""
    buffers = []
    for k, slot in enumerate(slots):
        stride = contiguous_geometry(tuple(slot.shape)).stride
        guarded = allocate(
            f"{label} {k}", tuple(slot.shape), stride, slot.dtype, device, arena=arena
        )
        fill_poison(guarded.view, call.poison, call.sentinel)
        buffers.append(guarded)
    return buffers


def rewrite(view: torch.Tensor, values: torch.Tensor) -> None:
    """Copy `values` into `view`'s elements without touching `view`'s version counter: the
    copy goes through a second tensor over the same storage, which has a counter of its own."""
    alias = torch.empty(0, dtype=view.dtype, device=view.device)
    alias.set_(view.untyped_storage(), view.storage_offset(), view.shape, view.stride())
    with torch.no_grad():
        alias.copy_(values.to(view.device).expand(view.shape))


def tensors_in(returned: object) -> tuple[torch.Tensor, ...]:
    if isinstance(returned, torch.Tensor):
        return (returned,)
    if isinstance(returned, (tuple, list)):
        return tuple(t for t in returned if isinstance(t, torch.Tensor))
    return ()


def returned_outputs(returned: object) -> tuple[torch.Tensor, ...]:
    """The outputs of a return-style candidate: one tensor, or a tuple or list of them."""
    if isinstance(returned, torch.Tensor):
        return (returned,)
    if isinstance(returned, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in returned):
        return tuple(returned)
    if isinstance(returned, (tuple, list)):
        kinds = ", ".join(type(t).__name__ for t in returned)
        what = f"a {type(returned).__name__} of ({kinds})"
    else:
        what = "None" if returned is None else f"a {type(returned).__name__}"
    raise CandidateFailure(
        "contract",
        f"the candidate returned {what}; it must return its outputs: a tensor, or a tuple of "
        "tensors in the declared order.",
    )


def check_guards(guarded: Sequence[GuardedTensor], call: int) -> list[GuardBreach]:
    return [b for b in (breach(g, call) for g in guarded) if b is not None]


def to_cpu(tensor: torch.Tensor) -> torch.Tensor:
    """A plain, contiguous CPU copy: no strides, subclasses or autograd history come along.
    Pageable, as a plain caller's would be: the candidate's process keeps no page-locked
    blocks between calls."""
    return host_copy(tensor, page_locked=False)


def named_after_output(allocation: GuardedTensor, outputs: Sequence[torch.Tensor]) -> GuardedTensor:
    """An allocation the candidate returned is reported as that output, not as scratch."""
    storage = allocation.buffer.untyped_storage().data_ptr()
    for i, output in enumerate(outputs):
        if type(output) is torch.Tensor and output.untyped_storage().data_ptr() == storage:
            return replace(allocation, label=f"output {i}")
    return allocation
