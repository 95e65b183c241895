"""Two Triton cross-entropy backward kernels that differ only in which upstream gradient scales
each row.

Each program takes a tile of rows and walks their vocabulary in chunks twice: once for the
running maximum and the sum of exponentials (in fp32, rescaled whenever the maximum grows), once
to write softmax minus the target's one-hot, times the row's upstream gradient.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Elements per program: 16 warps keep the per-thread share of a 16384-element tile at 32
# elements on a GPU. Triton's interpreter (CPU tensors) has no registers to spill and pays per
# program and operation, so there one program takes as many rows as fit in a much larger tile.
_TILE = 16384
_INTERPRETED_TILE = 1 << 19
_WARPS = 16
# The widest chunk of a row one step of the loops reads; longer rows take several steps.
_CHUNK = 2048


@triton.jit
def _cross_entropy_grad_rows(
    grad_loss_ptr,
    logits_ptr,
    targets_ptr,
    grad_logits_ptr,
    rows,
    vocab,
    stride_grad_loss,
    stride_logits_row,
    stride_logits_vocab,
    stride_targets,
    stride_grad_row,
    stride_grad_vocab,
    ROWS: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    # 64-bit offsets: row * stride overflows 32 bits on inputs with 2^31 elements.
    row = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    row_inside = row < rows
    lane = tl.arange(0, BLOCK_V).to(tl.int64)
    logits_rows = logits_ptr + row[:, None] * stride_logits_row
    grad_rows = grad_logits_ptr + row[:, None] * stride_grad_row

    row_max = tl.full((ROWS,), float("-inf"), tl.float32)
    total = tl.zeros((ROWS,), tl.float32)
    for start in range(0, vocab, BLOCK_V):
        column = start + lane
        inside = row_inside[:, None] & (column < vocab)[None, :]
        x = tl.load(
            logits_rows + column[None, :] * stride_logits_vocab, mask=inside, other=float("-inf")
        ).to(tl.float32)
        new_max = tl.maximum(row_max, tl.max(x, axis=1))
        # Rows past the end (and rows of -inf logits) have maximum -inf, and -inf - -inf is
        # NaN: shift by 0 there, so their exponentials are exp(-inf) = 0.
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        total = total * tl.exp(row_max - shift) + tl.sum(tl.exp(x - shift[:, None]), axis=1)
        row_max = new_max
    row_max = tl.where(row_max == float("-inf"), 0.0, row_max)
    # Rows past the end divide by 1, not by their empty sum: they are never stored.
    total = tl.where(row_inside, total, 1.0)

    upstream = tl.load(grad_loss_ptr + row * stride_grad_loss, mask=row_inside, other=0.0)
    upstream = upstream.to(tl.float32)
    target = tl.load(targets_ptr + row * stride_targets, mask=row_inside, other=0)
    for start in range(0, vocab, BLOCK_V):
        column = start + lane
        inside = row_inside[:, None] & (column < vocab)[None, :]
        x = tl.load(
            logits_rows + column[None, :] * stride_logits_vocab, mask=inside, other=float("-inf")
        ).to(tl.float32)
        probability = tl.exp(x - row_max[:, None]) / total[:, None]
        probability = tl.where(column[None, :] == target[:, None], probability - 1.0, probability)
        tl.store(
            grad_rows + column[None, :] * stride_grad_vocab,
            (upstream[:, None] * probability).to(grad_logits_ptr.dtype.element_ty),
            mask=inside,
        )


def _cross_entropy_backward(
    grad_loss: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor, stride_grad_loss: int
) -> torch.Tensor:
    rows, vocab = logits.shape
    grad_logits = torch.empty((rows, vocab), dtype=logits.dtype, device=logits.device)
    block_v = min(triton.next_power_of_2(vocab), _CHUNK)
    tile = _TILE if logits.device.type == "cuda" else _INTERPRETED_TILE
    tile_rows = max(1, min(triton.next_power_of_2(rows), tile // block_v))
    _cross_entropy_grad_rows[(triton.cdiv(rows, tile_rows),)](
        grad_loss,
        logits,
        targets,
        grad_logits,
        rows,
        vocab,
        stride_grad_loss,
        logits.stride(0),
        logits.stride(1),
        targets.stride(0),
        grad_logits.stride(0),
        grad_logits.stride(1),
        ROWS=tile_rows,
        BLOCK_V=block_v,
        num_warps=_WARPS,
    )
    return grad_logits


def fp32_softmax(
    grad_loss: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """Correct: the softmax's maximum and sum in fp32, each row scaled by its own upstream
    gradient, one rounding to the logits' dtype."""
    return _cross_entropy_backward(grad_loss, logits, targets, grad_loss.stride(0))


def first_row_upstream(
    grad_loss: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """Bug: reads the upstream gradient as a scalar (stride 0), so every row is scaled by
    grad_loss[0] instead of its own grad_loss[r].

    Exactly right when every row's upstream gradient is the same, which is the case
    `loss.sum().backward()` produces (a broadcast of ones, itself stride 0) and the only one
    benchmark verifiers try. Under a per-row weighted or masked loss, or a mean over a ragged
    batch, rows get the wrong scale: padding rows with weight 0 still push their gradient into
    the logits when row 0 is not padding, and vice versa.
    """
    return _cross_entropy_backward(grad_loss, logits, targets, 0)
