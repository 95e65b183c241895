"""Three Triton RMSNorm backward kernels built from the same two kernels.

The first kernel gives each program a tile of whole rows: it writes their input gradient and one
partial sum of the weight gradient over its rows (in fp32) into a buffer of partials, one row of
the buffer per program. The second adds the partials up column by column, in the buffer's dtype,
and rounds once to the weight's dtype. The candidates differ in the buffer's dtype and in which
strides they read the upstream gradient with.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Elements per program: 16 warps keep the per-thread share of a 16384-element tile at 32
# elements on a GPU. Triton's interpreter (CPU tensors) has no registers to spill and pays per
# program and operation, so there a program takes four times as many rows.
_TILE = 16384
_INTERPRETED_TILE = 1 << 16
_WARPS = 16
# Columns per program of the reduction over partials.
_REDUCE_BLOCK = 1024


@triton.jit
def _rmsnorm_grad_rows(
    grad_out_ptr,
    x_ptr,
    weight_ptr,
    rstd_ptr,
    grad_x_ptr,
    partials_ptr,
    rows,
    hidden,
    stride_grad_row,
    stride_grad_hidden,
    stride_x_row,
    stride_x_hidden,
    stride_weight,
    stride_rstd,
    stride_grad_x_row,
    stride_grad_x_hidden,
    stride_partials_program,
    ROWS: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    program = tl.program_id(0)
    # 64-bit offsets: row * stride overflows 32 bits on inputs with 2^31 elements.
    row = (program * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    column = tl.arange(0, BLOCK_H).to(tl.int64)
    row_inside = row < rows
    column_inside = column < hidden
    inside = row_inside[:, None] & column_inside[None, :]
    g = tl.load(
        grad_out_ptr + row[:, None] * stride_grad_row + column[None, :] * stride_grad_hidden,
        mask=inside,
        other=0.0,
    ).to(tl.float32)
    x = tl.load(
        x_ptr + row[:, None] * stride_x_row + column[None, :] * stride_x_hidden,
        mask=inside,
        other=0.0,
    ).to(tl.float32)
    weight = tl.load(weight_ptr + column * stride_weight, mask=column_inside, other=0.0)
    rstd = tl.load(rstd_ptr + row * stride_rstd, mask=row_inside, other=0.0).to(tl.float32)

    x_hat = x * rstd[:, None]
    weighted = weight.to(tl.float32)[None, :] * g
    correction = tl.sum(weighted * x_hat, axis=1) / hidden
    grad_x = rstd[:, None] * (weighted - x_hat * correction[:, None])
    tl.store(
        grad_x_ptr + row[:, None] * stride_grad_x_row + column[None, :] * stride_grad_x_hidden,
        grad_x.to(grad_x_ptr.dtype.element_ty),
        mask=inside,
    )
    # Summed over the tile's rows in fp32; padding lanes were loaded as zeros and add nothing.
    partial = tl.sum(g * x_hat, axis=0)
    tl.store(
        partials_ptr + program.to(tl.int64) * stride_partials_program + column,
        partial.to(partials_ptr.dtype.element_ty),
        mask=column_inside,
    )


@triton.jit
def _sum_partials(
    partials_ptr,
    grad_weight_ptr,
    programs,
    hidden,
    stride_partials_program,
    stride_grad_weight,
    BLOCK_H: tl.constexpr,
):
    column = (tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)).to(tl.int64)
    inside = column < hidden
    # The running sum has the partials' dtype: the addition is done in fp32, as a GPU does
    # half-precision arithmetic, and rounded to that dtype after every partial.
    total = tl.zeros((BLOCK_H,), partials_ptr.dtype.element_ty)
    # Stepping the pointer keeps the offset in 64-bit pointer arithmetic.
    partial = partials_ptr + column
    for _ in range(0, programs):
        addend = tl.load(partial, mask=inside, other=0.0)
        total = (total.to(tl.float32) + addend.to(tl.float32)).to(partials_ptr.dtype.element_ty)
        partial += stride_partials_program
    tl.store(
        grad_weight_ptr + column * stride_grad_weight,
        total.to(grad_weight_ptr.dtype.element_ty),
        mask=inside,
    )


def _rmsnorm_backward(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    rstd: torch.Tensor,
    grad_out_strides: tuple[int, int],
    partials_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    rows, hidden = x.shape
    grad_x = torch.empty((rows, hidden), dtype=x.dtype, device=x.device)
    grad_weight = torch.empty((hidden,), dtype=weight.dtype, device=x.device)
    block_h = triton.next_power_of_2(hidden)
    tile = _TILE if x.device.type == "cuda" else _INTERPRETED_TILE
    tile_rows = max(1, min(triton.next_power_of_2(rows), tile // block_h))
    programs = triton.cdiv(rows, tile_rows)
    partials = torch.empty((programs, hidden), dtype=partials_dtype, device=x.device)
    _rmsnorm_grad_rows[(programs,)](
        grad_out,
        x,
        weight,
        rstd,
        grad_x,
        partials,
        rows,
        hidden,
        grad_out_strides[0],
        grad_out_strides[1],
        x.stride(0),
        x.stride(1),
        weight.stride(0),
        rstd.stride(0),
        grad_x.stride(0),
        grad_x.stride(1),
        partials.stride(0),
        ROWS=tile_rows,
        BLOCK_H=block_h,
        num_warps=_WARPS,
    )
    reduce_block = min(block_h, _REDUCE_BLOCK)
    _sum_partials[(triton.cdiv(hidden, reduce_block),)](
        partials,
        grad_weight,
        programs,
        hidden,
        partials.stride(0),
        grad_weight.stride(0),
        BLOCK_H=reduce_block,
    )
    return grad_x, grad_weight


def fp32_partials(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Correct: the weight gradient's partial sums are kept, stored and added in fp32, and
    rounded to the weight's dtype once."""
    return _rmsnorm_backward(
        grad_out, x, weight, rstd, (grad_out.stride(0), grad_out.stride(1)), torch.float32
    )


def low_precision_partials(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bug: the buffer of partial sums is allocated in the input's dtype, so with fp16 or bf16
    inputs every partial is rounded to it and every addition of the final sum rounds again.

    Each partial is still summed in fp32 over its program's rows and the input gradient is
    untouched, so the damage grows with the number of programs, that is with the number of
    rows: with hidden 1024, at a benchmark's 1024 rows (64 programs) the weight gradient is off
    by about 2.5 roundings of its dtype, at 4096 rows by about 5, at 16384 rows by about 10 (a
    sound kernel: one). In fp16 a partial of large gradients overflows to inf where fp32 would
    hold it, and partials of both signs then add up to NaN. In fp32 it is the correct kernel.
    """
    return _rmsnorm_backward(
        grad_out, x, weight, rstd, (grad_out.stride(0), grad_out.stride(1)), x.dtype
    )


def contiguous_upstream(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bug: reads the upstream gradient with x's strides, assuming it is laid out as the
    activation is.

    Right whenever both are contiguous, which is how benchmarks call a backward. Autograd
    hands a backward whatever layout the next operation's backward produced: a transpose in the
    graph (attention's head reshapes, a matmul's gradient) gives a transposed or strided
    upstream gradient, and `loss.sum()` a stride-0 broadcast. Read with x's strides, such a
    gradient is scrambled, or read past its storage.
    """
    return _rmsnorm_backward(grad_out, x, weight, rstd, (x.stride(0), x.stride(1)), torch.float32)
