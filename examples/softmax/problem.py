"""Masked softmax over the last axis.

y[r, c] = exp(x[r, c]) / sum over kept c' of exp(x[r, c'])   where mask[r, c] is True
y[r, c] = 0                                                   where mask[r, c] is False

Convention for rows with nothing to normalise: a row whose kept elements are all -inf, which
includes a row with no kept element at all, is all zeros (a padded query attends to nothing and
contributes nothing). NaN or +inf among a row's kept elements makes the whole row NaN.
"""

from __future__ import annotations

import torch

from kernelaudit import Axis, MaskInput, Output, Problem, TensorInput


def masked_softmax(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    compute = torch.promote_types(x.dtype, torch.float32)
    scores = x.to(compute).masked_fill(~mask, float("-inf"))
    # Subtracting the row maximum keeps exp() from overflowing on large logits; an empty row's
    # maximum is -inf, replaced by 0 so the row computes exp(-inf) = 0 instead of NaN.
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)
    weights = torch.exp(scores - row_max)
    total = weights.sum(dim=-1, keepdim=True)
    y = weights / total.masked_fill(total == 0, 1.0)
    return y.to(x.dtype)


problem = Problem(
    name="masked_softmax",
    reference=masked_softmax,
    axes=(Axis("rows"), Axis("cols")),
    inputs=(
        # No bfloat16: the Triton interpreter, which runs these kernels on CPU, rounds fp32 to
        # bf16 by truncation, so even a correct kernel would show twice the error there.
        TensorInput("x", ("rows", "cols"), dtypes=(torch.float32, torch.float16)),
        MaskInput("mask", ("rows", "cols"), kind="bool"),
    ),
    outputs=(Output("y", ("rows", "cols"), dtype="x"),),
    workloads=({"rows": 256, "cols": 1024},),
    description=__doc__ or "",
)
