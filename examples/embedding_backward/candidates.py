"""Two Triton embedding-gradient kernels that differ only in the accumulator's dtype.

Each program takes a tile of tokens x hidden columns and adds every gradient row into the row of
its id with atomic additions, so several tokens with the same id, in one tile or in many, all
land. The accumulator is then rounded to the gradient's dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Elements per program: large tiles keep the number of programs (and the interpreter's cost per
# program) low; 16 warps keep the per-thread share of a 16384-element tile at 32 elements.
_TILE = 16384
_WARPS = 16


@triton.jit
def _scatter_add_rows(
    grad_out_ptr,
    ids_ptr,
    accumulator_ptr,
    tokens,
    hidden,
    stride_grad_token,
    stride_grad_hidden,
    stride_ids,
    stride_accumulator_row,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    # 64-bit offsets: token * stride overflows 32 bits on transposed inputs with 2^31 elements.
    token = (tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)).to(tl.int64)
    column = (tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)).to(tl.int64)
    token_inside = token < tokens
    inside = token_inside[:, None] & (column[None, :] < hidden)
    row = tl.load(ids_ptr + token * stride_ids, mask=token_inside, other=0).to(tl.int64)
    grad = tl.load(
        grad_out_ptr + token[:, None] * stride_grad_token + column[None, :] * stride_grad_hidden,
        mask=inside,
        other=0.0,
    )
    tl.atomic_add(
        accumulator_ptr + row[:, None] * stride_accumulator_row + column[None, :],
        grad.to(accumulator_ptr.dtype.element_ty),
        mask=inside,
    )


def _scatter_add(
    grad_out: torch.Tensor, ids: torch.Tensor, num_embeddings: int, accumulate: torch.dtype
) -> torch.Tensor:
    tokens, hidden = grad_out.shape
    accumulator = torch.zeros(num_embeddings, hidden, dtype=accumulate, device=grad_out.device)
    block_h = min(triton.next_power_of_2(hidden), 64)
    block_t = min(triton.next_power_of_2(tokens), _TILE // block_h)
    grid = (triton.cdiv(tokens, block_t), triton.cdiv(hidden, block_h))
    _scatter_add_rows[grid](
        grad_out,
        ids,
        accumulator,
        tokens,
        hidden,
        grad_out.stride(0),
        grad_out.stride(1),
        ids.stride(0),
        accumulator.stride(0),
        BLOCK_T=block_t,
        BLOCK_H=block_h,
        num_warps=_WARPS,
    )
    return accumulator.to(grad_out.dtype)


# Twice the gradient's width. A row that takes n terms, added one at a time in whatever order
# the atomics land, carries ~sqrt(n) roundings of the accumulator: for 16384 terms in an
# accumulator as wide as the output, ~100 roundings of the output's dtype.
_WIDER = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64}


def wide_accumulator(
    grad_out: torch.Tensor, ids: torch.Tensor, num_embeddings: int
) -> torch.Tensor:
    """Correct: atomic additions into a buffer twice as wide as the gradient (fp32 for fp16,
    fp64 for fp32), one rounding to the gradient's dtype at the end. The order of the additions
    varies from run to run on a GPU, so the last bits may too (the problem declares it
    non-deterministic)."""
    return _scatter_add(grad_out, ids, num_embeddings, _WIDER[grad_out.dtype])


def accumulate_in_low_precision(
    grad_out: torch.Tensor, ids: torch.Tensor, num_embeddings: int
) -> torch.Tensor:
    """Bug: the buffer is allocated in the gradient's own dtype, so with fp16 gradients every
    atomic addition rounds to fp16.

    With uniform ids each row takes a few additions and the extra roundings stay within a
    rounding or two of the correctly accumulated result, which is why benchmarks with `randint`
    ids pass it. With Zipf-distributed ids a frequent row takes thousands: once its sum is large,
    each small addition is a fraction of one fp16 step and rounds away, and the row stagnates
    (a sum of ones stops at 2048). In fp32 the same defect costs far less (13 more bits).
    """
    return _scatter_add(grad_out, ids, num_embeddings, grad_out.dtype)
