"""Two Triton LayerNorm kernels that differ only in which lanes enter the variance.

Each program normalises a tile of whole rows: the row is padded to a power-of-two number of
lanes, the lanes past `hidden` are loaded as 0 and never stored.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Elements per program: a few rows at once keeps the number of programs (and the interpreter's
# cost per program) low for short rows.
_TILE = 8192


@triton.jit
def _layernorm_rows(
    x_ptr,
    weight_ptr,
    bias_ptr,
    y_ptr,
    rows,
    hidden,
    eps,
    stride_x_row,
    stride_x_col,
    stride_weight,
    stride_bias,
    stride_y_row,
    stride_y_col,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    COUNT_PADDING: tl.constexpr,
):
    # 64-bit offsets: row * stride overflows 32 bits on inputs with 2^31 elements.
    row = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    col = tl.arange(0, BLOCK).to(tl.int64)
    col_inside = col < hidden
    inside = (row < rows)[:, None] & col_inside[None, :]
    x = tl.load(
        x_ptr + row[:, None] * stride_x_row + col[None, :] * stride_x_col, mask=inside, other=0.0
    ).to(tl.float32)
    mean = tl.sum(x, axis=1) / hidden
    # One correction step (the corrected two-pass algorithm): the mean of the residuals is the
    # rounding error of the first mean. Without it a constant row, whose variance is 0, comes
    # out as bias + (that error) / sqrt(eps): ~1e-4 off in fp32, as the plain reference is.
    mean += tl.sum(tl.where(inside, x - mean[:, None], 0.0), axis=1) / hidden
    centred = x - mean[:, None]
    if not COUNT_PADDING:
        # Padding lanes hold 0, so centred they hold -mean: zero them before squaring.
        centred = tl.where(inside, centred, 0.0)
    variance = tl.sum(centred * centred, axis=1) / hidden
    rstd = 1.0 / tl.sqrt(variance + eps)
    weight = tl.load(weight_ptr + col * stride_weight, mask=col_inside, other=0.0).to(tl.float32)
    bias = tl.load(bias_ptr + col * stride_bias, mask=col_inside, other=0.0).to(tl.float32)
    y = centred * rstd[:, None] * weight[None, :] + bias[None, :]
    tl.store(
        y_ptr + row[:, None] * stride_y_row + col[None, :] * stride_y_col,
        y.to(y_ptr.dtype.element_ty),
        mask=inside,
    )


def _layernorm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, count_padding: bool
) -> torch.Tensor:
    rows, hidden = x.shape
    y = torch.empty((rows, hidden), dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(hidden)
    tile_rows = max(1, min(triton.next_power_of_2(rows), _TILE // block))
    _layernorm_rows[(triton.cdiv(rows, tile_rows),)](
        x,
        weight,
        bias,
        y,
        rows,
        hidden,
        eps,
        x.stride(0),
        x.stride(1),
        weight.stride(0),
        bias.stride(0),
        y.stride(0),
        y.stride(1),
        ROWS=tile_rows,
        BLOCK=block,
        COUNT_PADDING=count_padding,
        num_warps=min(16, max(4, tile_rows * block // 1024)),
    )
    return y


def masked_statistics(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """Correct: mean and variance over exactly `hidden` lanes, in fp32, the mean corrected once
    so that rows of equal values normalise exactly."""
    return _layernorm(x, weight, bias, eps, count_padding=False)


def counts_padding_lanes(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """Bug: the variance sums all BLOCK lanes. Each padding lane adds mean**2, inflating the
    variance by (BLOCK - hidden) / hidden * mean**2 and shrinking every output towards `bias`.

    Invisible when `hidden` is a power of two (no padding lanes), which covers most benchmark
    shapes, and small when rows have mean ~0 (a `randn` row's mean**2 is ~1/hidden, so the
    variance grows by that much). At hidden=1025 (BLOCK 2048) with rows of mean 32, the
    variance is ~1000 times too large.
    """
    return _layernorm(x, weight, bias, eps, count_padding=True)
