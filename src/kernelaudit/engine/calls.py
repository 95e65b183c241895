"""The call a case makes of the candidate, as it travels to the worker: shared by the
executor and by runs made outside the worker (the interpreted bounds check)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from kernelaudit.inputs.case import Case
from kernelaudit.problem.spec import Problem, resolve_shape
from kernelaudit.runner.messages import Call, OutputSlot, TensorArg


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
    slots: tuple[OutputSlot, ...] = ()
    if problem.contract.style == "destination":
        config = problem.dtype_configs()[case.dtype_config]
        sizes = case.size_map()
        slots = tuple(
            OutputSlot(resolve_shape(out.shape, sizes), problem.output_dtype(out, config))
            for out in problem.outputs
        )
    return Call(args=tuple(args), slots=slots, poison=poison)
