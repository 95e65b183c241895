"""What an integer tensor of a KernelBench problem's `get_inputs()` is: indices into the
smallest axis above every value its samples hold, or values kept as `get_inputs()` gives them
where redrawing them would break what they mean (negative values, rows that are sorted or
permutations, no axis large enough)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kernelaudit.formats.kernelbench.axes import AxisNames, Batch
from kernelaudit.formats.kernelbench.model import BATCH
from kernelaudit.problem.spec import Dim, GeneratedInput, IndexInput, Input


def integer_input(
    name: str,
    shape: tuple[Dim, ...],
    dtype: torch.dtype,
    drawn: Sequence[object],
    axes: AxisNames,
    batch: Batch,
) -> tuple[Input, str]:
    """The input `name` of integer (or single bool) dtype is declared as, from its values in
    every sample `drawn`, with the note that says why."""
    values = [t for t in drawn if isinstance(t, torch.Tensor) and t.numel()]
    low = min((int(t.min()) for t in values), default=0)
    high = max((int(t.max()) for t in values), default=0)
    seen = f"values {low}..{high} in get_inputs() samples"
    why = ""
    if dtype == torch.bool:
        why = "it is a single bool"
    elif not values:
        why = "it is empty"
    elif low < 0:
        why = f"its values are negative ({seen})"
    elif any(structured(t) for t in values):
        why = f"its values have structure, sorted or a permutation ({seen})"
    sizes = dict(axes.by_size)
    if batch.free:
        sizes.setdefault(batch.size, BATCH)
    # a fixed axis before the batch axis of the same size: classes index a class axis
    above = sorted((size, axis == BATCH, axis) for size, axis in sizes.items() if size > high)
    if not why and not above:
        why = f"no axis is larger than its values ({seen})"
    if why:
        note = (
            f"{name}: {dtype} tensor kept as get_inputs() gives it, since {why}; "
            "kernelaudit varies only its layout"
        )
        return GeneratedInput(name, shape, dtype=dtype), note
    size, _, bound = above[0]
    note = f"{name}: integer tensor read as indices into axis {bound} (size {size}), {seen}"
    return IndexInput(name, shape, bound=bound, dtype=dtype), note


def structured(t: torch.Tensor) -> bool:
    """Values kernelaudit would break by redrawing them uniformly: rows sorted along the last
    axis (offsets, boundaries) or rows that are permutations."""
    if t.dim() == 0 or t.shape[-1] < 3:
        return False
    rows = t.reshape(-1, t.shape[-1])
    if bool((rows.diff(dim=-1) >= 0).all()):
        return True
    return bool((rows.sort(dim=-1).values == torch.arange(rows.shape[-1])).all())
