"""Layer normalisation over the last axis, with a learned scale and shift.

y[r, :] = (x[r, :] - mean(x[r, :])) / sqrt(var(x[r, :]) + eps) * weight + bias

with the biased variance (divided by `hidden`, as torch.nn.LayerNorm does).
"""

from __future__ import annotations

import torch

from kernelaudit import Axis, Output, Problem, ScalarInput, TensorInput

# No bfloat16: the Triton interpreter, which runs these kernels on CPU, rounds fp32 to bf16 by
# truncation, so even a correct kernel would show twice the error of a correct rounding there.
_DTYPES = (torch.float32, torch.float16)


def layernorm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    # Statistics in at least fp32, one rounding to x's dtype at the end: what a fused kernel
    # does, so running this at the input's dtype is a fair baseline for one.
    compute = torch.promote_types(x.dtype, torch.float32)
    values = x.to(compute)
    mean = values.mean(dim=-1, keepdim=True)
    centred = values - mean
    variance = (centred * centred).mean(dim=-1, keepdim=True)
    y = centred * torch.rsqrt(variance + eps) * weight.to(compute) + bias.to(compute)
    return y.to(x.dtype)


problem = Problem(
    name="layernorm",
    reference=layernorm,
    axes=(Axis("rows"), Axis("hidden")),
    inputs=(
        TensorInput("x", ("rows", "hidden"), dtypes=_DTYPES),
        TensorInput("weight", ("hidden",), dtypes=_DTYPES, role="weight"),
        TensorInput("bias", ("hidden",), dtypes=_DTYPES, role="weight"),
        ScalarInput("eps", value=1e-5),
    ),
    outputs=(Output("y", ("rows", "hidden"), dtype="x"),),
    # A power-of-two hidden size, as in most benchmarks: the tile has no padding lanes.
    workloads=({"rows": 256, "hidden": 1024},),
    description=__doc__ or "",
)
