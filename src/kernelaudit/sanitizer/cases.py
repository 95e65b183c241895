"""The few small cases the sanitizer runs, and the arguments the candidate gets for each.

A sanitized kernel runs tens of times slower, and the slowdown is paid again for every tool, so
only one or two cases are run: the problem's smallest workload with every axis moved down to a
size that leaves one element in the last tile (2^k + 1), where a missing tail mask reads or
writes past the end; then the workload itself, as users run it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import materialize
from kernelaudit.problem.dims import resolve_shape
from kernelaudit.problem.spec import Axis, Problem

TAIL_CAP = 4096
"""The tail-sizes case keeps every axis below this size: a workload's axis of 32768 runs at
2049 there (the workload case itself runs at the workload's sizes)."""


@dataclass(frozen=True)
class Arguments:
    """One case as the candidate is called on it: `args` in the problem's input order (dense
    CPU tensors and scalars), then, for a destination-passing candidate, empty outputs of the
    shapes and dtypes in `slots`."""

    label: str
    args: tuple[object, ...]
    slots: tuple[tuple[tuple[int, ...], torch.dtype], ...] = ()


def tail_size(axis: Axis, size: int) -> int:
    """The largest size of the form 2^k + 1 that is at most `size` and that the axis admits;
    for an axis that only takes multiples, one multiple less than `size`; else `size`."""
    for power in range(max(size - 1, 1).bit_length(), -1, -1):
        candidate = 2**power + 1
        if candidate <= size and axis.admits(candidate):
            return candidate
    fewer = size - axis.multiple_of
    return fewer if axis.multiple_of > 1 and axis.admits(fewer) else size


def small_cases(problem: Problem, count: int) -> list[Case]:
    """Up to `count` cases, the tail sizes first (see the module's description)."""
    if count <= 0 or not problem.workloads:
        return []
    workload = min(problem.workloads, key=lambda w: math.prod(w.as_dict().values()))
    sizes = workload.as_dict()
    axes = {axis.name: axis for axis in problem.axes}
    tail = {name: _tail(axes.get(name, Axis(name)), size) for name, size in sizes.items()}
    cases = []
    if tail != sizes:
        label = "tail sizes " + " ".join(f"{name}={size}" for name, size in tail.items())
        cases.append(Case(tuple(tail.items()), label=label))
    cases.append(Case(tuple(sizes.items()), label=workload.name))
    return cases[:count]


def _tail(axis: Axis, size: int) -> int:
    """The axis's tail size, below `TAIL_CAP` (the workload's size where none is admitted)."""
    tail = tail_size(axis, min(size, TAIL_CAP))
    return tail if axis.admits(tail) else size


def arguments(problem: Problem, case: Case) -> Arguments:
    """What the candidate is called with on `case` (raises what `materialize` raises)."""
    values = materialize(problem, case)
    slots: tuple[tuple[tuple[int, ...], torch.dtype], ...] = ()
    if problem.contract.style == "destination":
        config = problem.dtype_configs()[case.dtype_config]
        slots = tuple(
            (resolve_shape(out.shape, case.size_map()), problem.output_dtype(out, config))
            for out in problem.outputs
        )
    return Arguments(case.label, tuple(values[inp.name] for inp in problem.inputs), slots)
