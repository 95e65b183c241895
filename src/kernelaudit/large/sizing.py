"""The large case: one batch axis grown from the first workload until the largest tensor holds
more than 2^31 elements, with the rows worth checking.

Growing a batch axis keeps the truth cheap: rows along it are independent, so the fp64 truth is
computed for a handful of rows, not for the whole tensor. The rows checked are those holding the
elements just before and after the 2^31st of the largest tensor, where a 32-bit offset first
wraps, and the last rows, whose offsets are all past it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernelaudit.inputs.batch import axis_position
from kernelaudit.problem.dims import resolve_shape
from kernelaudit.problem.spec import Dim, GeneratedInput, Problem, ScalarInput

ELEMENTS = 1 << 31
"""The element count past which a signed 32-bit offset wraps."""

TAIL_ROWS = 4
"""Rows past the limit at the end of the grown axis, all of them checked."""

RETURNED_ELEMENTS = 1 << 25
"""The most elements the checked rows of every tensor may hold together: they come back to the
auditor, which computes their truth in float64."""


_MEMORY_SLACK = 1.25
"""Cases needing at most this many times the fewest bytes count as equally cheap."""


class CannotGrow(Exception):
    """No large case can be built for the problem; the message says why, as a sentence."""


@dataclass(frozen=True)
class LargeCase:
    """A case past the limit and the rows of it that are checked.

    sizes: every axis's size (the first workload's, the grown axis's own).
    largest: the tensor (input or output) with the most elements, `largest_elements` of them.
    bytes_needed: every input and output at these sizes, in the configuration's dtypes.
    around_limit: the rows of the grown axis holding the elements of `largest` just before and
        after element number `elements`.
    last: the last rows of the grown axis.
    outermost: whether the grown axis is the first dimension of `largest`.
    """

    axis: str
    sizes: tuple[tuple[str, int], ...]
    dtype_config: int
    largest: str
    largest_elements: int
    bytes_needed: int
    around_limit: tuple[int, ...]
    last: tuple[int, ...]
    outermost: bool = True
    elements: int = ELEMENTS

    def size_map(self) -> dict[str, int]:
        return dict(self.sizes)

    @property
    def size(self) -> int:
        return self.size_map()[self.axis]

    def rows(self) -> tuple[int, ...]:
        """Every checked row, in order."""
        return tuple(sorted({*self.around_limit, *self.last}))

    def describe(self) -> str:
        return (
            f"{self.axis}={self.size:,} ({self.largest} holds {self.largest_elements:,} elements,"
            f" past {limit_name(self.elements)})"
        )


def limit_name(elements: int) -> str:
    """2^31 rather than 2147483648, where the count is a power of two."""
    power = elements.bit_length() - 1
    return f"2^{power}" if elements == 1 << power else f"{elements:,}"


def tensors_of(
    problem: Problem, config: int
) -> list[tuple[str, tuple[Dim, ...], torch.dtype, bool]]:
    """(name, declared shape, dtype, is an input) of every tensor input and every output."""
    dtypes = problem.dtype_configs()[config]
    found = [(i.name, i.shape, dtypes[i.name], True) for i in problem.tensor_inputs]
    found += [(o.name, o.shape, problem.output_dtype(o, dtypes), False) for o in problem.outputs]
    return found


def plan_large_case(problem: Problem, axes: tuple[str, ...], elements: int = ELEMENTS) -> LargeCase:
    """A case whose largest tensor holds more than `elements` elements, growing one of `axes` in
    one dtype configuration: among those needing at most 25% more bytes than the fewest, one
    whose grown axis is outermost in the largest tensor. CannotGrow says why there is none."""
    if not axes:
        raise CannotGrow(
            "the problem has no batch axis to grow, so the truth would be needed for the whole "
            "of a tensor past the limit; declare Contract(batch_axes=...) if an axis whose size "
            "may vary is one"
        )
    generated = [i.name for i in problem.inputs if isinstance(i, GeneratedInput)]
    if generated:
        raise CannotGrow(
            f"input {generated[0]!r} comes only from the problem's own generator, which cannot "
            "be asked for tensors of this size on the device"
        )
    from_generator = problem.sampler.default_for if problem.sampler is not None else ()
    scalars = [i.name for i in problem.inputs if isinstance(i, ScalarInput)]
    if any(name in from_generator for name in scalars):
        named = next(name for name in scalars if name in from_generator)
        raise CannotGrow(
            f"argument {named!r} takes its value from the problem's own generator, which "
            "cannot be asked for a case of this size"
        )
    options: list[LargeCase] = []
    reasons: list[str] = []
    for config in range(len(problem.dtype_configs())):
        for axis in axes:
            grown = _grown(problem, axis, config, elements)
            if isinstance(grown, str):
                reasons.append(grown)
            else:
                options.append(grown)
    if not options:
        raise CannotGrow("; ".join(dict.fromkeys(reasons)))
    fewest = min(case.bytes_needed for case in options)
    cheap = [case for case in options if case.bytes_needed <= fewest * _MEMORY_SLACK]
    # kernels tile the inner dimensions and loop or launch over the outer one: an outer axis
    # grown keeps every tile the size the kernel was written for
    return min(cheap, key=lambda case: (not case.outermost, case.bytes_needed))


def _grown(problem: Problem, axis: str, config: int, elements: int) -> LargeCase | str:
    declared = next(a for a in problem.axes if a.name == axis)
    base = problem.workloads[0].as_dict()
    tensors = tensors_of(problem, config)
    growing = [t for t in tensors if axis_position(t[1], axis) is not None]
    one = {**base, axis: 1}
    per_row = {name: math.prod(resolve_shape(shape, one)) for name, shape, _, _ in growing}
    widest = max(per_row.values(), default=0)
    if widest == 0:
        return f"no tensor grows with axis {axis!r}"
    # rows from `past` on start at or after element `elements` of the widest tensor
    past = -(-elements // widest)
    multiple = max(declared.multiple_of, 1)
    # a workload already past the limit is run at its own size
    size = max(-(-(past + TAIL_ROWS) // multiple) * multiple, base[axis])
    if declared.max is not None and size > declared.max:
        return (
            f"axis {axis!r} would need {size:,} to pass {limit_name(elements)} elements and is "
            f"declared at most {declared.max:,}"
        )
    sizes = {**base, axis: size}
    counts = {name: math.prod(resolve_shape(shape, sizes)) for name, shape, _, _ in tensors}
    needed = sum(counts[name] * dtype.itemsize for name, _, dtype, _ in tensors)
    largest, shape, _, _ = max(growing, key=lambda t: counts[t[0]])
    concrete = resolve_shape(shape, sizes)
    position = axis_position(shape, axis)
    assert position is not None
    inner = math.prod(concrete[position + 1 :])
    row = elements % (size * inner) // inner
    around = tuple(r for r in (row - 1, row, row + 1) if 0 <= r < size)
    last = tuple(range(max(size - TAIL_ROWS, 0), size))
    rows = len({*around, *last})
    returned = sum(
        per_row[name] * rows if name in per_row else counts[name]
        for name, _, _, is_input in tensors
        if is_input or name in per_row
    )
    if returned > RETURNED_ELEMENTS:
        return (
            f"growing axis {axis!r}, the {rows} checked rows would hold {returned:,} elements, "
            f"more than the {RETURNED_ELEMENTS:,} the auditor takes back"
        )
    return LargeCase(
        axis=axis,
        sizes=tuple(sizes.items()),
        dtype_config=config,
        largest=largest,
        largest_elements=counts[largest],
        bytes_needed=needed,
        around_limit=around,
        last=last,
        outermost=position == 0,
        elements=elements,
    )
