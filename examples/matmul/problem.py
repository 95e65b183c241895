"""Matrix product C = A @ B, accumulated in fp32 (at least) and rounded once to A's dtype."""

from __future__ import annotations

import torch

from kernelaudit import Axis, Output, Problem, TensorInput

# No bfloat16: the Triton interpreter, which runs these kernels on CPU, gets bf16 tl.dot wrong.
_DTYPES = (torch.float32, torch.float16)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    accumulate = torch.promote_types(a.dtype, torch.float32)
    return (a.to(accumulate) @ b.to(accumulate)).to(a.dtype)


problem = Problem(
    name="matmul",
    reference=matmul,
    axes=(Axis("m"), Axis("n"), Axis("k")),
    inputs=(
        TensorInput("a", ("m", "k"), dtypes=_DTYPES),
        TensorInput("b", ("k", "n"), dtypes=_DTYPES, role="weight"),
    ),
    outputs=(Output("c", ("m", "n"), dtype="a"),),
    # Multiples of every tile size, as benchmark shapes usually are.
    workloads=({"m": 256, "n": 256, "k": 256},),
    description=__doc__ or "",
)
