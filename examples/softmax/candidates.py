"""Two Triton masked-softmax kernels that differ only in how they treat a row with no kept
element.

Each program takes a tile of whole rows, padded to a power-of-two number of lanes; masked and
padding lanes enter as -inf, and the row maximum is subtracted before exp() so large logits
cannot overflow.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Elements per program: a few rows at once keeps the number of programs (and the interpreter's
# cost per program) low for short rows.
_TILE = 8192


@triton.jit
def _masked_softmax_rows(
    x_ptr,
    mask_ptr,
    y_ptr,
    rows,
    cols,
    stride_x_row,
    stride_x_col,
    stride_mask_row,
    stride_mask_col,
    stride_y_row,
    stride_y_col,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    GUARD_EMPTY_ROWS: tl.constexpr,
):
    # 64-bit offsets: row * stride overflows 32 bits on inputs with 2^31 elements.
    row = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    col = tl.arange(0, BLOCK).to(tl.int64)
    inside = (row < rows)[:, None] & (col < cols)[None, :]
    keep = tl.load(
        mask_ptr + row[:, None] * stride_mask_row + col[None, :] * stride_mask_col,
        mask=inside,
        other=0,
    )
    x = tl.load(
        x_ptr + row[:, None] * stride_x_row + col[None, :] * stride_x_col, mask=inside, other=0.0
    ).to(tl.float32)
    scores = tl.where(keep != 0, x, float("-inf"))
    row_max = tl.max(scores, axis=1)
    if GUARD_EMPTY_ROWS:
        # An empty row's maximum is -inf and -inf - -inf is NaN: subtract 0 there instead, so
        # every weight is exp(-inf) = 0, and divide by 1 instead of by the zero total.
        row_max = tl.where(row_max == float("-inf"), 0.0, row_max)
    weights = tl.exp(scores - row_max[:, None])
    total = tl.sum(weights, axis=1)
    if GUARD_EMPTY_ROWS:
        total = tl.where(total == 0.0, 1.0, total)
    y = weights / total[:, None]
    tl.store(
        y_ptr + row[:, None] * stride_y_row + col[None, :] * stride_y_col,
        y.to(y_ptr.dtype.element_ty),
        mask=inside,
    )


def _masked_softmax(x: torch.Tensor, mask: torch.Tensor, guard_empty_rows: bool) -> torch.Tensor:
    rows, cols = x.shape
    y = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(cols)
    tile_rows = max(1, min(triton.next_power_of_2(rows), _TILE // block))
    _masked_softmax_rows[(triton.cdiv(rows, tile_rows),)](
        x,
        mask,
        y,
        rows,
        cols,
        x.stride(0),
        x.stride(1),
        mask.stride(0),
        mask.stride(1),
        y.stride(0),
        y.stride(1),
        ROWS=tile_rows,
        BLOCK=block,
        GUARD_EMPTY_ROWS=guard_empty_rows,
        num_warps=min(16, max(4, tile_rows * block // 1024)),
    )
    return y


def guards_masked_rows(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Correct: rows with no kept element come out as zeros, as the reference defines."""
    return _masked_softmax(x, mask, guard_empty_rows=True)


def nan_on_masked_rows(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Bug: a fully masked row has maximum -inf, every lane computes exp(-inf - -inf) = NaN and
    the whole row comes out NaN, which then spreads through whatever consumes it (an attention
    output, a loss).

    Invisible on any input where every row keeps at least one element, which covers benchmarks
    that draw random masks or no mask at all; a padded batch, where a padding query keeps
    nothing, exposes it.
    """
    return _masked_softmax(x, mask, guard_empty_rows=False)
