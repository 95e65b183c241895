"""A large call checked on some of its rows: the last rows along one of the problem's batch
axes (`inputs.batch`: each row of every result depends only on the same row of the inputs).

Copying a whole large call to check it would cost the job memory it may not have. Along a
batch axis, a window of rows of the inputs gives exactly those rows of the outputs, so the
guard copies and judges the window alone. The last rows are taken: they are the ones with the
largest offsets, where an index computed in too narrow an integer first goes wrong. A problem
with no batch axis (an embedding gradient sums every token into its id's row) has large calls
counted, not checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kernelaudit.guarding.judged import copied, tensor_bytes
from kernelaudit.inputs.batch import axis_position, batch_axes, result_shapes
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import restrict_rows
from kernelaudit.oracle.truth import axis_sizes
from kernelaudit.problem.spec import Problem


@dataclass(frozen=True)
class Window:
    """Rows start..stop along `axis`, and where that axis stands in each result."""

    axis: str
    start: int
    stop: int
    positions: tuple[int | None, ...]

    def describe(self) -> str:
        return f"rows {self.start} to {self.stop - 1} of {self.axis}"

    def inputs(self, problem: Problem, args: Sequence[object]) -> tuple[object, ...]:
        """Copies of the window's rows of every input (the whole of those without the axis;
        an argument that is the axis's size becomes the window's width)."""
        names = [i.name for i in problem.inputs]
        by_name = dict(zip(names, args, strict=True))
        case = Case(tuple(axis_sizes(problem, by_name).items()))
        cut = restrict_rows(problem, case.with_rows(self.axis, self.start, self.stop), by_name)
        # copies: a cut along the first dimension of a contiguous tensor is a view of it
        return tuple(copied(cut[name]) for name in names)

    def outputs(self, outputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        return tuple(
            o if at is None else o.narrow(at, self.start, self.stop - self.start)
            for o, at in zip(outputs, self.positions, strict=False)
        )


def window(problem: Problem, args: Sequence[object], most_bytes: int) -> Window | None:
    """The last rows of the call along the problem's first batch axis whose inputs fit in
    `most_bytes`; None where the problem has no batch axis every result has."""
    try:
        axes = batch_axes(problem)
    except Exception:  # a reference the inference cannot run: no window, the call is counted
        return None
    names = [i.name for i in problem.inputs]
    if len(args) != len(names):
        return None
    sizes = axis_sizes(problem, dict(zip(names, args, strict=True)))
    total = tensor_bytes(args)
    for axis in axes:
        positions = tuple(axis_position(shape, axis) for shape in result_shapes(problem))
        size = sizes.get(axis, 0)
        if size < 2 or any(p is None for p in positions[: len(problem.outputs)]):
            continue
        rows = max(1, min(size - 1, size * most_bytes // max(total, 1)))
        return Window(axis, size - rows, size, positions)
    return None
