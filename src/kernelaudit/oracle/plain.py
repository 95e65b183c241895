"""The plain error figures benchmarks print for a run at one of their workloads: the largest
absolute and relative difference from the truth, and whether NaN or Inf appeared. kernelaudit
judges with its own metrics (`oracle.compare`); these are reported so a benchmark's users can
read its results in their own terms."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kernelaudit.checks.base import Observation


def plain_errors(observation: Observation) -> dict[str, Any] | None:
    """Max absolute and relative error over every compared result of the probe's first call,
    and NaN/Inf presence in the candidate's results; None when the call failed or its results
    do not line up with the truth (those are reported as findings)."""
    result = observation.result
    if result.error or not result.calls:
        return None
    outputs = observation.aligned(result.calls[0].outputs, 0)
    truth = observation.expected_at(0).truth
    if len(outputs) != len(truth):
        return None
    worst_abs, worst_rel, has_nan, has_inf = 0.0, 0.0, False, False
    for got, want in zip(outputs, truth, strict=True):
        if tuple(got.shape) != tuple(want.shape):
            return None
        figures = result_errors(got, want)
        has_nan, has_inf = has_nan or figures.has_nan, has_inf or figures.has_inf
        worst_abs = max(worst_abs, figures.absolute)  # 0 where nothing was compared
        worst_rel = max(worst_rel, figures.relative)
    return {
        "max_absolute_error": worst_abs,
        "max_relative_error": worst_rel,
        "has_nan": has_nan,
        "has_inf": has_inf,
    }


@dataclass(frozen=True)
class ResultErrors:
    """One result's plain figures against its truth."""

    absolute: float
    """The largest absolute difference where both are finite (0 where none is)."""
    relative: float
    """The largest of those differences over the truth's magnitude (0 where none is)."""
    has_nan: bool
    has_inf: bool


def result_errors(got: torch.Tensor, want: torch.Tensor) -> ResultErrors:
    """`got`'s plain figures against `want` (of the same shape), in float64: the elements
    either side holds a NaN or an infinity at are left out of the differences, not dropped
    from the tensors (masked, which costs half of indexing them out)."""
    got64 = got.to(torch.complex128 if got.is_complex() else torch.float64)
    want64 = want.to(got64.dtype)
    has_nan, has_inf = bool(torch.isnan(got).any()), bool(torch.isinf(got).any())
    finite = torch.isfinite(got64) & torch.isfinite(want64)
    if not bool(finite.any()):
        return ResultErrors(0.0, 0.0, has_nan, has_inf)
    left_out = ~finite
    difference = (got64 - want64).abs().masked_fill_(left_out, 0.0)
    absolute = float(difference.max())
    scale = want64.abs().clamp_min_(torch.finfo(torch.float64).tiny)
    relative = float(difference.div_(scale).masked_fill_(left_out, 0.0).max())
    return ResultErrors(absolute, relative, has_nan, has_inf)
