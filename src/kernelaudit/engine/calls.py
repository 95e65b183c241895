"""The call a case makes of the candidate, as it travels to the worker: shared by the
executor and by runs made outside the worker (the interpreted bounds check)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import tensor_elements
from kernelaudit.problem.dims import resolve_shape
from kernelaudit.problem.spec import Problem
from kernelaudit.runner.boundary.messages import Call, OutputSlot, TensorArg
from kernelaudit.runner.boundary.poison import AUDIT_SENTINEL


def call_for(
    problem: Problem, case: Case, inputs: Mapping[str, object], poison: str = "nan"
) -> Call:
    """The call of the candidate a case makes: its inputs in declaration order (tensors in the
    case's layout), and the preallocated outputs of a destination-passing contract."""
    args: list[object] = []
    for inp in problem.inputs:
        value = inputs[inp.name]
        args.append(
            TensorArg(value, case.layout_of(inp.name)) if isinstance(value, torch.Tensor) else value
        )
    slots = declared_outputs(problem, case) if problem.contract.style == "destination" else ()
    return Call(args=tuple(args), slots=slots, poison=poison, sentinel=AUDIT_SENTINEL)


def declared_outputs(problem: Problem, case: Case) -> tuple[OutputSlot, ...]:
    """The problem's outputs at the case's sizes and dtypes, as slots."""
    config = problem.dtype_configs()[case.dtype_config]
    sizes = case.size_map()
    return tuple(
        OutputSlot(resolve_shape(out.shape, sizes), problem.output_dtype(out, config))
        for out in problem.outputs
    )


REPLY_COPIES = 4
"""Copies of a call's inputs and outputs a reply may carry: the outputs, the last timed
repetition's outputs, the inputs after the call, and as much again for everything else."""

REPLY_SLACK_BYTES = 64 << 20
"""Bytes every reply may carry besides tensors: fingerprints, kernel lists, messages."""


def reply_limit(problem: Problem, cases: list[Case], fallback: int) -> int:
    """The most bytes a worker's reply to calls on `cases` can hold: every declared input and
    output at eight bytes an element, `REPLY_COPIES` times, and `REPLY_SLACK_BYTES`. Where an
    output's shape is not fixed by the case's sizes, `fallback` (the worker's own memory
    limit): the bound then comes from what the worker may hold, never from what it says."""
    total = REPLY_SLACK_BYTES
    for case in cases:
        counts = tensor_elements(problem, case.size_map())
        if None in counts:
            return max(fallback, total)
        total += REPLY_COPIES * 8 * sum(c for c in counts if c is not None)
    return total
