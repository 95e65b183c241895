"""A large call checked on some of its rows.

Copying a whole large call to check it would cost the job memory it may not have. Two kinds of
slice give exact rows of the outputs from a part of the inputs, so the guard copies and judges
that part alone:

- `Window`: the last rows along one of the problem's batch axes (`inputs.batch`: each row of
  every result depends only on the same row of the inputs). The last rows are taken: they are
  the ones with the largest offsets, where an index computed in too narrow an integer first
  goes wrong.
- `Hottest`: where an index input keys the results' rows (`inputs.batch.keyed_rows`: an
  embedding gradient sums every token into its id's row), the elements holding the most
  frequent ids, all of them, and those ids' rows of the outputs. The most frequent ids are
  the rows with the longest sums, where accumulating in too low a precision shows.

A call neither kind fits into the guard's bound is counted, not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from kernelaudit.guarding.judged import copied, results, tensor_bytes
from kernelaudit.inputs.batch import (
    Keyed,
    axis_position,
    batch_axes,
    keyed_rows,
    result_shapes,
    select_keyed,
)
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.rows import restrict_rows
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

    def reference(self, reference: Callable[..., object]) -> Callable[..., object]:
        """The reference on the window's inputs gives the window's rows: as it is."""
        return reference

    def row(self, output: int, row: int | None) -> int | None:
        """The call's row for `row` of output `output`'s slice (its first dimension)."""
        at = self.positions[output] if output < len(self.positions) else None
        return row + self.start if row is not None and at == 0 else row


@dataclass(frozen=True)
class Hottest:
    """The elements of `keyed.axis` whose index is one of `ids` (the most frequent ones), and
    those rows of the outputs along `keyed.bound`."""

    keyed: Keyed
    ids: tuple[int, ...]
    """Ascending: the slice's rows, in order."""
    positions: tuple[int | None, ...]
    elements: int
    """How many elements of the call hold one of `ids`."""

    def describe(self) -> str:
        return (
            f"the {len(self.ids)} most frequent values of {self.keyed.index} "
            f"({self.elements} of its {self.keyed.axis})"
        )

    def inputs(self, problem: Problem, args: Sequence[object]) -> tuple[object, ...]:
        names = [i.name for i in problem.inputs]
        by_name = dict(zip(names, args, strict=True))
        chosen = torch.tensor(self.ids, dtype=torch.int64)
        selected = select_keyed(problem, self.keyed, by_name, chosen)
        # index_select copies; the inputs without the axis are copied here
        return tuple(
            selected[name] if selected[name] is not by_name[name] else copied(by_name[name])
            for name in names
        )

    def outputs(self, outputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        return tuple(self._rows(o, at) for o, at in zip(outputs, self.positions, strict=False))

    def reference(self, reference: Callable[..., object]) -> Callable[..., object]:
        """The reference on the selected elements, cut to the chosen ids' rows (its other rows
        lack the elements left out)."""

        def rows_of(*args: object) -> tuple[torch.Tensor, ...]:
            whole = results(reference(*args))
            return tuple(self._rows(o, at) for o, at in zip(whole, self.positions, strict=False))

        return rows_of

    def row(self, output: int, row: int | None) -> int | None:
        at = self.positions[output] if output < len(self.positions) else None
        return self.ids[row] if row is not None and at == 0 else row

    def _rows(self, output: torch.Tensor, at: int | None) -> torch.Tensor:
        if at is None:
            return output
        chosen = torch.tensor(self.ids, dtype=torch.int64, device=output.device)
        return output.index_select(at, chosen)


Slice = Window | Hottest


def sliced(problem: Problem, args: Sequence[object], most_bytes: int) -> Slice | None:
    """A slice of the call whose inputs fit in `most_bytes`: the last rows along the first
    batch axis every output has, else the most frequent ids of an index input that keys the
    outputs' rows; None where neither fits."""
    names = [i.name for i in problem.inputs]
    if len(args) != len(names):
        return None
    by_name = dict(zip(names, args, strict=True))
    try:
        axes = batch_axes(problem)
    except Exception:  # a reference the inference cannot run: no slice, the call is counted
        return None
    outputs = len(problem.outputs)
    sizes = axis_sizes(problem, by_name)
    for axis in axes:
        positions = tuple(axis_position(shape, axis) for shape in result_shapes(problem))
        size = sizes.get(axis, 0)
        rows = _fitting(problem, by_name, axis, size, most_bytes)
        if size < 2 or rows < 1 or any(p is None for p in positions[:outputs]):
            continue
        rows = min(rows, size - 1)
        return Window(axis, size - rows, size, positions)
    try:
        keyed = keyed_rows(problem)  # inferred only for a problem that needs it, once
    except Exception:
        return None
    for each in keyed:
        chosen = _hottest(problem, by_name, each, sizes.get(each.axis, 0), most_bytes)
        if chosen is not None:
            ids, elements = chosen
            positions = tuple(axis_position(s, each.bound) for s in result_shapes(problem))
            return Hottest(each, ids, positions, elements)
    return None


def _fitting(
    problem: Problem, by_name: dict[str, object], axis: str, size: int, most_bytes: int
) -> int:
    """How many rows along `axis` a slice may take for its inputs to fit in `most_bytes`."""
    along, across = _bytes_along(problem, by_name, axis)
    if size < 1 or across >= most_bytes:
        return 0
    return min(size, (most_bytes - across) * size // max(along, 1))


def _hottest(
    problem: Problem, by_name: dict[str, object], keyed: Keyed, size: int, most_bytes: int
) -> tuple[tuple[int, ...], int] | None:
    """The most frequent ids whose elements fit in `most_bytes`, and how many elements those
    are; None where not even the most frequent one's do."""
    index = by_name[keyed.index]
    if not isinstance(index, torch.Tensor) or index.numel() == 0 or size < 1:
        return None
    fits = _fitting(problem, by_name, keyed.axis, size, most_bytes)
    counts = torch.bincount(index.flatten().long())
    order = counts.argsort(descending=True, stable=True)
    order = order[counts[order] > 0]  # the ids the call holds, most frequent first
    taken = int((counts[order].cumsum(0) <= fits).sum())
    if taken < 1:
        return None
    ids = order[:taken].sort().values
    return tuple(int(i) for i in ids.tolist()), int(counts[ids].sum())


def _bytes_along(problem: Problem, by_name: dict[str, object], axis: str) -> tuple[int, int]:
    """The input bytes that have `axis` (by its own name), and those that do not."""
    along = across = 0
    for inp in problem.inputs:
        value = by_name[inp.name]
        if not isinstance(value, torch.Tensor):
            continue
        if axis in getattr(inp, "shape", ()):
            along += tensor_bytes([value])
        else:
            across += tensor_bytes([value])
    return along, across
