"""The axes of a KernelBench problem: the batch axis, the leading size every input shares,
and whether the reference lets it vary (each output dim then a function of it: "batch",
"batch * k", "batch + c", or fixed); and the names of the axes held at their sizes.

KernelBench models hard-code their sizes; the batch is free only when neither the constructor's
arguments nor the weights mention it and the reference runs at other batch sizes with every
output dim following the batch along a line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from kernelaudit.formats.kernelbench.model import BATCH
from kernelaudit.problem.spec import Dim

PROBES = (1, 2, 3, 4)
"""Batch sizes the reference is tried at (the first two it takes) to see which output dims
follow the batch."""


@dataclass(frozen=True)
class Batch:
    """What the reader concluded about the batch axis: free (with the smallest size the
    reference takes, and each output dim as a function of the batch), or held fixed and why."""

    size: int
    free: bool
    minimum: int = 1
    output_dims: tuple[tuple[Dim | None, ...], ...] = ()
    """Per output, per dim: BATCH or an expression over it, None where the dim is fixed."""
    why: str = ""


class AxisNames:
    """Fixed axes, one per distinct size: named after the module constant holding the size when
    exactly one does ("num_classes"), else after where the size is first seen ("x_dim1")."""

    def __init__(self, constants: Mapping[str, int], taken: set[str]) -> None:
        self.constants = constants
        self.taken = taken
        self.by_size: dict[int, str] = {}

    def axis(self, size: int, where: str) -> str:
        if size not in self.by_size:
            named = [name for name, value in self.constants.items() if value == size]
            name = named[0] if len(named) == 1 else where
            while name in self.taken:
                name += "_"
            self.taken.add(name)
            self.by_size[size] = name
        return self.by_size[size]


def infer_batch(
    tensors: Sequence[torch.Tensor],
    arguments: object,
    weights: Sequence[torch.Tensor],
    outputs: Sequence[torch.Tensor],
    run: Callable[[Batch, int], tuple[torch.Tensor, ...]],
) -> Batch:
    """The leading size shared by every tensor of get_inputs() (`tensors`), free when the
    constructor's `arguments` and the `weights` do not mention it and the reference runs at
    other sizes with every output dim either fixed or following the batch. `run(batch, size)`
    calls the reference on inputs drawn at batch `size` for the free `batch`."""
    leading = {t.shape[0] for t in tensors if t.dim()}
    if len(leading) != 1:
        return Batch(0, False, why="the inputs share no leading size")
    (size,) = leading
    if size in integers(arguments):
        why = "the size also appears in get_init_inputs(), so the model may hard-code it"
        return Batch(size, False, why=why)
    if any(size in tensor.shape for tensor in weights):
        return Batch(size, False, why="a weight of the model has a dimension of that size")
    free = Batch(size, True)
    shapes: dict[int, list[tuple[int, ...]]] = {}
    minimum = 1
    for probe in (s for s in PROBES if s != size):
        if len(shapes) == 2:
            break
        try:
            probed = run(free, probe)
        except Exception as error:
            if probe == 1:
                minimum = 2
                continue
            why = f"the reference fails at batch size {probe} ({type(error).__name__}: {error})"
            return Batch(size, False, why=why)
        shapes[probe] = [tuple(o.shape) for o in probed]
    return _follow_batch(size, minimum, [tuple(o.shape) for o in outputs], shapes)


def integers(value: object) -> set[int]:
    """Every int in `value`, looking into lists, tuples and dicts."""
    if isinstance(value, bool):
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return set().union(*(integers(v) for v in value))
    return set()


def _follow_batch(
    size: int,
    minimum: int,
    at_size: list[tuple[int, ...]],
    probes: Mapping[int, list[tuple[int, ...]]],
) -> Batch:
    """Each output dim as a function of the batch ("batch", "batch * k", "batch + c", or None
    where it does not change), judged from the output shapes at `size` and at the probes."""
    if len(probes) < 2:
        return Batch(size, False, why="the reference fails at small batch sizes")
    points = [(size, at_size), *probes.items()]
    if any([len(s) for s in shapes] != [len(s) for s in at_size] for _, shapes in points):
        return Batch(size, False, why="the reference returns other outputs at other sizes")
    dims: list[tuple[Dim | None, ...]] = []
    for k, shape in enumerate(at_size):
        row: list[Dim | None] = []
        for d in range(len(shape)):
            try:
                row.append(_linear_in_batch([(b, shapes[k][d]) for b, shapes in points]))
            except ValueError:
                why = f"output {k} changes size along dim {d} in a way no size expression states"
                return Batch(size, False, why=why)
        dims.append(tuple(row))
    return Batch(size, True, minimum, tuple(dims))


def _linear_in_batch(points: list[tuple[int, int]]) -> str | None:
    """The expression `k * batch + c` the (batch, size) points follow, for an integer k >= 1;
    None when the size does not change. Raises ValueError when they follow no such line."""
    if len({size for _, size in points}) == 1:
        return None
    (b0, v0), (b1, v1) = points[0], points[1]
    slope, rest = divmod(v1 - v0, b1 - b0)
    offset = v0 - slope * b0
    if rest or slope < 1 or any(v != slope * b + offset for b, v in points):
        raise ValueError(f"sizes {points} follow no line k * batch + c")
    expression = BATCH if slope == 1 else f"{BATCH} * {slope}"
    if offset:
        expression += f" + {offset}" if offset > 0 else f" - {-offset}"
    return expression
