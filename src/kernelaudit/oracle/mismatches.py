"""Where a result disagrees with the truth, position by position: the ways its non-finite
values can differ from the truth's, the bit-exact rule's mismatches, and the first positions of
any disagreement, for a report to show."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from kernelaudit.oracle.rule import SHOWN_MISMATCHES

_SCAN_ELEMENTS = 1 << 22

Value = float | int | bool


@dataclass(frozen=True)
class Mismatch:
    index: tuple[int, ...]
    candidate: Value
    expected: Value


def has_infinity(dtype: torch.dtype) -> bool:
    # float8 formats named "fn" (finite) or "fnuz" have no infinity; out-of-range values
    # convert to NaN or saturate there
    return not str(dtype).endswith(("fn", "fnuz", "fnu"))


NONFINITE_KEYS = (
    "nan-where-finite",
    "inf-where-finite",
    "wrong-where-nan",
    "wrong-where-inf",
    "wrong-where-overflow",
)
"""The ways a candidate's non-finite values can disagree with the truth's, in report order."""


def no_nonfinite_mismatches() -> list[tuple[str, int, tuple[Mismatch, ...]]]:
    """`nonfinite_pattern`'s answer where nothing is non-finite or beyond the dtype's range."""
    return [(key, 0, ()) for key in NONFINITE_KEYS]


def nonfinite_pattern(
    candidate: torch.Tensor,
    truth: torch.Tensor,
    overflow: torch.Tensor,
    dtype: torch.dtype,
    baseline: Callable[[], torch.Tensor] | None = None,
) -> list[tuple[str, int, tuple[Mismatch, ...]]]:
    """(failure key, count, first positions) for each way the candidate's non-finite values
    can disagree with the truth's.

    Where the truth is NaN, infinite or beyond the dtype's range, no finite answer is right and
    which non-finite one comes out is the algorithm's: there a candidate that gives what the
    baseline gives (NaN where it is NaN, its infinity where it is infinite) does as well as the
    reference. `baseline()` gives the baseline's values (anywhere: they are moved to the
    candidate's device), asked for only where some value is not finite."""
    candidate = _testable(candidate)
    finite = torch.isfinite(candidate).all() & torch.isfinite(truth).all() & ~overflow.any()
    if bool(finite):  # the common case, in one read-back: no way to disagree
        return no_nonfinite_mismatches()
    c_nan, c_inf = torch.isnan(candidate), torch.isinf(candidate)
    t_nan, t_inf = torch.isnan(truth), torch.isinf(truth)
    representable = ~(t_nan | t_inf | overflow)
    same_sign = torch.signbit(candidate) == torch.signbit(truth)
    saturated = (c_inf | (candidate.abs() == torch.finfo(dtype).max)) & same_sign
    if not has_infinity(dtype):
        saturated |= c_nan
    as_baseline = torch.zeros_like(c_nan)
    if baseline is not None:
        reference = _testable(baseline().to(candidate.device))
        as_baseline = (c_nan & torch.isnan(reference)) | (
            c_inf & torch.isinf(reference) & (torch.signbit(candidate) == torch.signbit(reference))
        )
    masks = tuple(
        zip(
            NONFINITE_KEYS,
            (
                representable & c_nan,
                representable & c_inf,
                t_nan & ~c_nan & ~as_baseline,
                t_inf & ~(c_inf & same_sign) & ~as_baseline,
                overflow & ~saturated & ~as_baseline,
            ),
            strict=True,
        )
    )
    counts = torch.stack([count_true(mask) for _, mask in masks]).tolist()
    return [
        (key, count, first_mismatches(mask, candidate, truth) if count else ())
        for (key, mask), count in zip(masks, counts, strict=True)
    ]


def _flat_chunks(*tensors: torch.Tensor) -> Iterator[tuple[torch.Tensor, ...]]:
    """The same `_SCAN_ELEMENTS` positions of each of `tensors` (one shape), flattened, one
    chunk at a time: a result of billions of elements is compared without float64 copies of
    it whole."""
    flats = [t.reshape(-1) for t in tensors]
    for start in range(0, flats[0].numel(), _SCAN_ELEMENTS):
        yield tuple(flat[start : start + _SCAN_ELEMENTS] for flat in flats)


def count_true(mask: torch.Tensor) -> torch.Tensor:
    """How many elements of a boolean `mask` are set, as a 0-dim tensor where it is, counted a
    chunk at a time: a sum (and `count_nonzero` on a GPU, which sums) widens the whole mask to
    64-bit integers first, 8 GiB for a result of a billion elements."""
    counts = [chunk.sum() for (chunk,) in _flat_chunks(mask)]
    if not counts:
        return torch.zeros((), dtype=torch.int64, device=mask.device)
    return torch.stack(counts).sum()


def _testable(values: torch.Tensor) -> torch.Tensor:
    """`values` where every test of non-finite values and signs exists for their dtype: a
    float8 result widened to float32, which holds each of its values exactly."""
    return values.to(torch.float32) if values.dtype.itemsize == 1 else values


def bit_exact_applies(baseline: torch.Tensor, truth: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the dtype represents the float64 truth exactly at every position where it is
    finite and the baseline (at any floating dtype) reproduces it there: then a candidate must
    too, bit for bit. One read-back."""
    compared, agree = [], []
    for b, t in _flat_chunks(baseline, truth):
        finite = torch.isfinite(t)
        exact = torch.where(finite, t, 0.0)
        representable = (exact.to(dtype).to(torch.float64) == exact).all()
        reproduced = (torch.where(finite, b.to(torch.float64), 0.0) == exact).all()
        compared.append(finite.any())
        agree.append(representable & reproduced)
    if not compared:
        return False
    some, every = torch.stack((torch.stack(compared).any(), torch.stack(agree).all())).tolist()
    return bool(some and every)


def bit_exact_mismatches(
    candidate: torch.Tensor, truth: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """Where the candidate (at any floating dtype) differs from a float64 truth the bit-exact
    rule applies to, among the positions where the truth is finite: a mask of their shape."""
    # compared by value, so -0.0 equals +0.0; where the truth is subnormal, differences no
    # larger than the smallest normal are what flushing to zero does, which the metrics forgive
    tiny = torch.finfo(dtype).smallest_normal
    mask = torch.empty(candidate.shape, dtype=torch.bool, device=candidate.device)
    for c, t, m in _flat_chunks(candidate, truth, mask):
        c = c.to(torch.float64)
        flushed = (t.abs() < tiny) & ((c - t).abs() <= tiny)
        torch.logical_and(torch.isfinite(t) & (c != t), ~flushed, out=m)
    return mask


def _first_positions(mask: torch.Tensor, most: int) -> list[int]:
    """The flat (row-major) positions of the first `most` set elements of `mask`, scanned a
    chunk at a time."""
    flat = mask.reshape(-1)
    positions: list[int] = []
    for start in range(0, flat.numel(), _SCAN_ELEMENTS):
        hits = torch.nonzero(flat[start : start + _SCAN_ELEMENTS]).flatten()
        positions += [start + int(h) for h in hits[: most - len(positions)]]
        if len(positions) == most:
            break
    return positions


def first_mismatches(
    mask: torch.Tensor, candidate: torch.Tensor, expected: torch.Tensor
) -> tuple[Mismatch, ...]:
    positions = _first_positions(mask, SHOWN_MISMATCHES)
    c, e = candidate.reshape(-1), expected.reshape(-1)
    return tuple(Mismatch(unravel(p, mask.shape), c[p].item(), e[p].item()) for p in positions)


def unravel(flat: int, shape: torch.Size) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        flat, position = divmod(flat, size) if size else (flat, 0)
        index.append(position)
    return tuple(reversed(index))


def locate(mask: torch.Tensor) -> tuple[tuple[str, Any], ...]:
    """Where the bad elements are (some are): count, first indices, and the rows and columns
    they span. Read without a list of every bad position, which takes eight bytes a dimension
    for each."""
    evidence: list[tuple[str, Any]] = [
        ("elements", int(count_true(mask))),
        ("of", mask.numel()),
        ("first indices", [unravel(p, mask.shape) for p in _first_positions(mask, 5)]),
    ]
    for dim in range(mask.dim()):
        others = [d for d in range(mask.dim()) if d != dim]
        touched = torch.nonzero(mask.any(dim=others) if others else mask).flatten()
        evidence.append(
            (
                f"dim {dim} indices",
                f"{int(touched.min())}..{int(touched.max())} ({touched.numel()} of "
                f"{mask.shape[dim]})",
            )
        )
    return tuple(evidence)
