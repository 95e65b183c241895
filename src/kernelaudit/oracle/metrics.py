"""How far a floating result is from the truth, in three views.

normwise: the whole result at once, ||C - T|| / ||T||.
worst_row: the worst row (all dimensions but the last flattened), so an error concentrated in a
    few rows (a hot embedding row, one attention head) is not averaged away.
componentwise: the worst single element, relative to its own magnitude or the result's RMS.

Where the truth is below the normal range of the output dtype, each element's absolute error is
first reduced by `A = smallest_normal` (never below zero): a difference no larger than what
flushing subnormals to zero costs is not an error. Every denominator has a floor: `A` itself
(times sqrt(count) for norms), so a truth of about zero measures errors in units of `A`. The
row floor `||T|| / sqrt(rows)` (the RMS row norm) keeps rows whose true values cancel to about
zero from dominating; the element floor `rms(T)` does the same for single elements.

All arithmetic is float64 over positions where both the result and the truth are finite
(non-finite values are the comparison's business). Large results are processed in chunks of
rows so memory stays a small multiple of one chunk. Where the caller knows both are finite and
the truth within the dtype's range (`clean`, nearly every comparison), no masks are made, and
norms of results of 4 bytes or fewer are taken without rescaling, which their range makes
safe: about half the passes over the data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

_CHUNK_ELEMENTS = 1 << 22
_KEPT_ELEMENTS = 1 << 23
"""Up to this many elements, a comparison keeps its float64 chunks between its two passes
(a few hundred MiB at most) instead of converting them twice."""


@dataclass(frozen=True)
class ErrorMetrics:
    normwise: float
    worst_row: float
    worst_row_index: int
    """Index of the worst row among the result's rows (leading dimensions flattened)."""
    componentwise: float
    worst_element_index: int
    """Flat (row-major) index of the worst element."""
    worst_element_value: float
    worst_element_truth: float
    compared: int
    """How many elements were compared (both finite)."""


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the distance from 1 to the next representable number: one rounding's relative error."""
    return torch.finfo(dtype).eps / 2


def absolute_floor(dtype: torch.dtype) -> float:
    """The absolute error forgiven per element, and the smallest denominator (`A`): the
    dtype's smallest normal number, what a flush to zero can cost."""
    return torch.finfo(dtype).smallest_normal


def flushed_terms_allowance(dtype: torch.dtype, depth: int) -> float:
    """What flushing subnormal terms of a float32 (float64 for float64 results) accumulation of
    `depth` terms to zero can cost a result: `depth` smallest normals of the accumulator. GPUs
    flush in atomics and fast-math paths; it only matters where results are themselves tiny."""
    accumulator = torch.float32 if dtype.itemsize <= 4 else torch.float64
    return max(depth, 1) * torch.finfo(accumulator).smallest_normal


def _excess(
    c: torch.Tensor, t: torch.Tensor, t_abs: torch.Tensor, dtype: torch.dtype, depth: int
) -> torch.Tensor:
    """|c - t| less what flushing subnormals to zero can cost: A where the truth is below the
    output's normal range, and the flushed-terms allowance everywhere; never below zero.
    `t_abs` is |t|."""
    floor = absolute_floor(dtype)
    allowance = flushed_terms_allowance(dtype, depth)
    forgiven = torch.where(t_abs < floor, floor + allowance, allowance)
    return torch.sub(c, t).abs_().sub_(forgiven).clamp_(min=0.0)


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(1, -1) if t.dim() <= 1 else t.reshape(-1, t.shape[-1])


@dataclass(frozen=True)
class _Chunk:
    """Rows `start`, ... of candidate and truth in float64, zero where either is non-finite,
    with how many elements of them are compared (both finite), |t|, and the error beyond the
    subnormal allowances (`_excess`)."""

    start: int
    c: torch.Tensor
    t: torch.Tensor
    t_abs: torch.Tensor
    compared: torch.Tensor
    excess: torch.Tensor


def _chunks(
    values: torch.Tensor, truth: torch.Tensor, dtype: torch.dtype, depth: int, clean: bool
) -> Iterator[_Chunk]:
    c_rows, t_rows = _rows(values), _rows(truth)
    step = max(1, _CHUNK_ELEMENTS // max(1, c_rows.shape[1]))
    for start in range(0, c_rows.shape[0], step):
        c = c_rows[start : start + step].to(torch.float64)
        t = t_rows[start : start + step].to(torch.float64)
        if clean:
            compared = torch.full((), c.numel(), dtype=torch.int64, device=c.device)
        else:
            finite = torch.isfinite(c) & torch.isfinite(t)
            c, t = torch.where(finite, c, 0.0), torch.where(finite, t, 0.0)
            compared = finite.sum()
        t_abs = t.abs()
        yield _Chunk(start, c, t, t_abs, compared, _excess(c, t, t_abs, dtype, depth))


def _row_norms(
    x: torch.Tensor, x_abs: torch.Tensor | None = None, scaled: bool = True
) -> torch.Tensor:
    """Each row's 2-norm; `x_abs` is |x| where known. `scaled`: each row divided by its
    largest magnitude first, so squares of huge float64 values cannot overflow nor tiny ones
    underflow (not needed where every value is within float32's range)."""
    if not scaled:
        return torch.linalg.vector_norm(x, dim=-1)
    scale = (x.abs() if x_abs is None else x_abs).amax(dim=-1, keepdim=True)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return scale.squeeze(-1) * torch.linalg.vector_norm(x / scale, dim=-1)


def _norm(row_norms: torch.Tensor) -> torch.Tensor:
    """The norm of a vector of row norms, as a 0-dim tensor where the vector lives."""
    if not row_norms.numel():
        return torch.zeros((), dtype=torch.float64, device=row_norms.device)
    return _row_norms(row_norms.reshape(1, -1))[0]


@dataclass(frozen=True)
class _RowNorms:
    error: torch.Tensor
    truth: torch.Tensor
    compared: torch.Tensor
    """How many elements were compared, a 0-dim tensor (read once, with everything else)."""
    row_length: int


def _row_norms_of(values: torch.Tensor, chunks: Iterable[_Chunk], scaled: bool) -> _RowNorms:
    row_length = _rows(values).shape[1]
    if values.numel() == 0:
        empty = torch.zeros(0, dtype=torch.float64, device=values.device)
        return _RowNorms(empty, empty, torch.zeros((), dtype=torch.int64), row_length)
    errors, truths, compared = [], [], []
    for chunk in chunks:
        errors.append(_row_norms(chunk.excess, chunk.excess, scaled))  # never negative
        truths.append(_row_norms(chunk.t, chunk.t_abs, scaled))
        compared.append(chunk.compared)
    return _RowNorms(torch.cat(errors), torch.cat(truths), torch.stack(compared).sum(), row_length)


def _unscaled(dtype: torch.dtype, clean: bool) -> bool:
    """Whether norms need no rescaling: every value finite and within the range of a dtype of
    at most 4 bytes, whose squares and their sums stay far inside float64's range."""
    return clean and dtype.itemsize <= 4


def _row_errors(norms: _RowNorms, dtype: torch.dtype) -> torch.Tensor:
    rows = norms.error.numel()
    if rows == 0:
        return norms.error
    rms_row = _norm(norms.truth) / math.sqrt(rows)
    floor = torch.clamp(rms_row, min=math.sqrt(norms.row_length) * absolute_floor(dtype))
    return norms.error / torch.maximum(norms.truth, floor)


def row_errors(
    values: torch.Tensor, truth: torch.Tensor, dtype: torch.dtype | None = None, depth: int = 1
) -> torch.Tensor:
    """Each row's relative error ||C_r - T_r|| / max(||T_r||, ||T|| / sqrt(rows), sqrt(len)·A),
    in float64, one entry per row (leading dimensions flattened). `dtype` is the output's
    (`values.dtype` when not given); it sets the absolute floor A."""
    dtype = dtype or values.dtype
    chunks = _chunks(values, truth, dtype, depth, clean=False)
    return _row_errors(_row_norms_of(values, chunks, scaled=True), dtype)


def row_squared_errors(values: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Each row's sum of squared differences from the truth, in float64 (a non-finite
    difference counting zero), one entry per row (leading dimensions flattened), computed a
    chunk of rows at a time."""
    v_rows, t_rows = _rows(values), _rows(truth)
    step = max(1, _CHUNK_ELEMENTS // max(1, v_rows.shape[1]))
    sums = [
        torch.sub(v_rows[start : start + step].to(torch.float64), t_rows[start : start + step])
        .nan_to_num_(0.0, 0.0, 0.0)
        .square_()
        .sum(dim=1)
        for start in range(0, v_rows.shape[0], step)
    ]
    return torch.cat(sums) if sums else torch.zeros(0, dtype=torch.float64, device=values.device)


def _again(
    kept: list[_Chunk] | None,
    values: torch.Tensor,
    truth: torch.Tensor,
    dtype: torch.dtype,
    depth: int,
    clean: bool,
) -> Iterable[_Chunk]:
    return kept if kept is not None else _chunks(values, truth, dtype, depth, clean)


def error_metrics(
    values: torch.Tensor,
    truth: torch.Tensor,
    dtype: torch.dtype,
    depth: int = 1,
    clean: bool = False,
) -> ErrorMetrics:
    """Error of `values` (at any floating dtype, widened a chunk at a time) against `truth`
    (same shape, on the same device), for a result of floating dtype `dtype`. `clean`: the
    caller knows both hold only finite values and the truth none beyond the dtype's largest
    (`all_clean`); the figures are the same, in fewer passes.

    Computed where the tensors are (on the GPU when they are there), every figure kept as a
    tensor until the end and read back in one transfer: no synchronisation per chunk or row.
    """
    floor = absolute_floor(dtype)

    # both passes below read the same chunks: kept between them unless that is a lot of memory
    small = values.numel() <= _KEPT_ELEMENTS
    kept = list(_chunks(values, truth, dtype, depth, clean)) if small else None
    chunks = _again(kept, values, truth, dtype, depth, clean)
    norms = _row_norms_of(values, chunks, scaled=not _unscaled(dtype, clean))
    if norms.error.numel() == 0:
        return ErrorMetrics(0.0, 0.0, 0, 0.0, 0, 0.0, 0.0, 0)
    per_row = _row_errors(norms, dtype)
    compared = norms.compared.to(torch.float64)
    truth_norm = _norm(norms.truth)
    normwise = _norm(norms.error) / torch.maximum(truth_norm, compared.sqrt() * floor)
    worst_row_index = torch.argmax(per_row)

    rms = truth_norm / compared.clamp(min=1.0).sqrt()
    denominator = torch.clamp(rms, min=floor)
    bests = []
    for chunk in _again(kept, values, truth, dtype, depth, clean):
        relative = chunk.excess.div_(torch.maximum(chunk.t_abs, denominator)).reshape(-1)
        position = torch.argmax(relative)
        bests.append(
            torch.stack(
                (
                    relative[position],
                    (position + chunk.start * chunk.c.shape[1]).to(torch.float64),
                    chunk.c.reshape(-1)[position],
                    chunk.t.reshape(-1)[position],
                )
            )
        )
    # the first chunk holding the largest value, as a scan in row-major order would find it
    table = torch.stack(bests)
    chosen = table[torch.argmax(table[:, 0])]
    figures = torch.cat(
        (
            torch.stack((normwise, per_row[worst_row_index], worst_row_index.to(torch.float64))),
            chosen,
            compared.reshape(1),
        )
    ).tolist()
    if figures[7] == 0:
        return ErrorMetrics(0.0, 0.0, 0, 0.0, 0, 0.0, 0.0, 0)
    return ErrorMetrics(
        normwise=figures[0],
        worst_row=figures[1],
        worst_row_index=int(figures[2]),
        componentwise=figures[3],
        worst_element_index=int(figures[4]),
        worst_element_value=figures[5],
        worst_element_truth=figures[6],
        compared=int(figures[7]),
    )


def float64_chunks(values: torch.Tensor) -> Iterator[torch.Tensor]:
    """`values` flattened and widened to float64 `_CHUNK_ELEMENTS` at a time (whole where they
    are float64 already), so that a result of billions of elements is never widened whole."""
    flat = values.reshape(-1)
    if flat.dtype == torch.float64:
        yield flat
        return
    for start in range(0, flat.numel(), _CHUNK_ELEMENTS):
        yield flat[start : start + _CHUNK_ELEMENTS].to(torch.float64)


def float64_sum(values: torch.Tensor) -> torch.Tensor:
    """The sum of `values` in float64, as a 0-dim tensor where they are (`float64_chunks`)."""
    sums = [chunk.sum() for chunk in float64_chunks(values)]
    if not sums:
        return torch.zeros((), dtype=torch.float64, device=values.device)
    return torch.stack(sums).sum()


def all_clean(values: torch.Tensor, truth: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether `values` (at any floating dtype) and `truth` (float64, on the same device) hold
    only finite values and the truth none beyond `dtype`'s largest: what
    `error_metrics(..., clean=True)` may assume. One read-back: a finite sum has no NaN or
    infinity among its terms (a sum that overflows only sends the comparison the long way)."""
    if truth.numel() == 0:
        return False
    low, high = torch.aminmax(truth)
    figures = torch.stack((float64_sum(values), truth.sum(), low, high)).tolist()
    largest = torch.finfo(dtype).max
    return (
        math.isfinite(figures[0])
        and math.isfinite(figures[1])
        and -largest <= figures[2]
        and figures[3] <= largest
    )
