"""Which outputs of a call share bytes with its inputs or with each other: storage shared is
not enough (the halves of a split along an inner axis interleave without a common element),
so the bytes both views reach are marked and compared."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from kernelaudit.runner.boundary.guard import storage_span


def aliases(outputs: Sequence[torch.Tensor], inputs: dict[int, torch.Tensor]) -> tuple[str, ...]:
    """Outputs whose bytes overlap an input's or another output's ("output 0 ~ input 2")."""
    found = []
    for i, output in enumerate(outputs):
        found += [f"output {i} ~ input {p}" for p, t in inputs.items() if _overlap(output, t)]
        found += [f"output {k} ~ output {i}" for k in range(i) if _overlap(outputs[k], output)]
    return tuple(found)


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether some byte belongs to an element of both. Views that only interleave (the two
    halves of a split along an inner axis, `torch.split`'s and `chunk`'s usual results) share
    their storage but no element: writing one never changes the other."""
    ra, rb = _byte_range(a), _byte_range(b)
    if ra is None or rb is None or a.device != b.device:
        return False
    if not (ra[0] < rb[1] and rb[0] < ra[1]):
        return False
    start, end = min(ra[0], rb[0]), max(ra[1], rb[1])
    # the map's unit: the largest that both views' elements and starts are whole multiples of
    unit = math.gcd(a.element_size(), b.element_size(), ra[0] - start, rb[0] - start)
    for where in (a.device, torch.device("cpu")):  # the host's memory where the device's is full
        try:
            marks = torch.zeros((end - start) // unit, dtype=torch.bool, device=where)
        except (torch.OutOfMemoryError, RuntimeError):
            continue
        _units_of(marks, a, start, unit).fill_(True)
        return bool(_units_of(marks, b, start, unit).any())
    return True  # no room for the map anywhere: the spans overlap, as far as can be told


def _units_of(marks: torch.Tensor, t: torch.Tensor, start: int, unit: int) -> torch.Tensor:
    """`t`'s bytes in `marks`, a map of the bytes from `start` in `unit`-byte steps."""
    per_element = t.element_size() // unit
    return marks.as_strided(
        (*t.shape, per_element),
        (*(s * per_element for s in t.stride()), 1),
        (t.data_ptr() - start) // unit,
    )


def _byte_range(t: torch.Tensor) -> tuple[int, int] | None:
    if type(t) is not torch.Tensor or t.layout != torch.strided or t.numel() == 0:
        return None
    start = t.data_ptr()
    return start, start + storage_span(tuple(t.shape), tuple(t.stride())) * t.element_size()
