"""A case's row window (`Case.rows`): the values of the whole case cut along one axis, and
which inputs cannot be cut along it."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from kernelaudit.errors import UsageError
from kernelaudit.inputs.case import Case
from kernelaudit.problem.dims import dim_axes
from kernelaudit.problem.spec import IndexInput, Input, Problem, ScalarInput


def restrict_rows(
    problem: Problem, case: Case, values: Mapping[str, torch.Tensor | int | float]
) -> dict[str, torch.Tensor | int | float]:
    """`values`, drawn for the whole of `case`, cut to its row window: every tensor with the
    window's axis keeps those entries along it (contiguous, bit-identical to the same rows of
    the whole), and an argument that is the axis's size becomes the window's width. Saved
    inputs are cut too, so they stay those the forward computed for the whole batch."""
    window = case.row_window()
    if window is None:
        return dict(values)
    axis, start, stop = window
    if axis not in case.size_map():
        raise UsageError(
            f"case rows restrict axis {axis!r}, which the case gives no size; name one of: "
            f"{', '.join(name for name, _ in case.sizes)}"
        )
    restricted = dict(values)
    for inp in problem.inputs:
        reason = uncuttable(inp, axis)
        if reason:
            raise UsageError(
                f"case rows cannot restrict axis {axis!r}: {reason}; restrict another axis"
            )
        if isinstance(inp, ScalarInput):
            if inp.axis == axis:
                restricted[inp.name] = stop - start
            continue
        value = values[inp.name]
        if axis in inp.shape and isinstance(value, torch.Tensor):
            cut = value.narrow(inp.shape.index(axis), start, stop - start)
            restricted[inp.name] = cut.contiguous()
    return restricted


def uncuttable(inp: Input, axis: str) -> str:
    """Why `inp` cannot be cut along `axis`; "" when it can (it lacks the axis, or has it once,
    by its own name)."""
    if isinstance(inp, ScalarInput):
        return ""
    if isinstance(inp, IndexInput) and axis in dim_axes(inp.bound):
        return f"index input {inp.name!r} points into it"
    nested = any(dim != axis and axis in dim_axes(dim) for dim in inp.shape)
    if nested or inp.shape.count(axis) > 1:
        return f"input {inp.name!r} has it twice or inside a size expression"
    return ""
