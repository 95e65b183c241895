"""Two launches of one tiled Triton matmul kernel that differ only in the size of the grid.

Each program computes one BLOCK_M x BLOCK_N tile of C, walking K in BLOCK_K steps with an fp32
accumulator; loads and the store are masked, so a tile may hang over the edge of the matrix.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK_M = 128
_BLOCK_N = 128
_BLOCK_K = 32


@triton.jit
def _matmul_tile(
    a_ptr,
    b_ptr,
    c_ptr,
    m,
    n,
    k,
    stride_a_m,
    stride_a_k,
    stride_b_k,
    stride_b_n,
    stride_c_m,
    stride_c_n,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # 64-bit offsets: row * stride overflows 32 bits on operands with 2^31 elements.
    rm = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    rn = (tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    rk = tl.arange(0, BLOCK_K).to(tl.int64)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        kk = start + rk
        a = tl.load(
            a_ptr + rm[:, None] * stride_a_m + kk[None, :] * stride_a_k,
            mask=(rm[:, None] < m) & (kk[None, :] < k),
            other=0.0,
        )
        b = tl.load(
            b_ptr + kk[:, None] * stride_b_k + rn[None, :] * stride_b_n,
            mask=(kk[:, None] < k) & (rn[None, :] < n),
            other=0.0,
        )
        # "ieee": fp32 operands multiplied in full fp32. The default on NVIDIA GPUs is TF32,
        # which keeps 10 mantissa bits of each operand: a silent precision downgrade.
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.store(
        c_ptr + rm[:, None] * stride_c_m + rn[None, :] * stride_c_n,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < m) & (rn[None, :] < n),
    )


def _matmul(a: torch.Tensor, b: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    _matmul_tile[grid](
        a,
        b,
        c,
        m,
        n,
        k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        BLOCK_M=_BLOCK_M,
        BLOCK_N=_BLOCK_N,
        BLOCK_K=_BLOCK_K,
        num_warps=8,
    )
    return c


def masked_tiles(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Correct: one program per tile, rounding the tile count up, so partial tiles at the
    bottom and right edges are computed (their loads and stores are masked)."""
    grid = (triton.cdiv(a.shape[0], _BLOCK_M), triton.cdiv(b.shape[1], _BLOCK_N))
    return _matmul(a, b, grid)


def drops_partial_tiles(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Bug: the grid rounds the tile count down. The last M % 128 rows and N % 128 columns of C
    belong to no program and keep whatever the allocator left there (zeros, stale values, NaN).

    Invisible whenever M and N are multiples of 128, as benchmark shapes usually are; any other
    size exposes it, and M or N below 128 leaves all of C unwritten.
    """
    grid = (a.shape[0] // _BLOCK_M, b.shape[1] // _BLOCK_N)
    return _matmul(a, b, grid)
