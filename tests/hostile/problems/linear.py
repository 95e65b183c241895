"""A linear layer without bias: y[m, n] = x[m, k] @ w[n, k].T, in float32.

Small enough that an audit spends its time on the candidate's behaviour, not on arithmetic."""

from __future__ import annotations

import torch

from kernelaudit import Output, Problem, TensorInput


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w.T


problem = Problem(
    name="linear",
    reference=linear,
    axes=("m", "n", "k"),
    inputs=(
        TensorInput("x", ("m", "k")),
        TensorInput("w", ("n", "k"), role="weight"),
    ),
    outputs=(Output("y", ("m", "n")),),
    workloads=({"m": 32, "n": 48, "k": 64},),
    description=__doc__ or "",
)
