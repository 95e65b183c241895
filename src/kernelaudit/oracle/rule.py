"""The judging rule's numbers: the error-ratio limit, the noise floors, the budgets, and every
constant with the reason for its value (docs/oracle.md is written from the same table)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernelaudit.oracle.metrics import unit_roundoff

RATIO_LIMIT = 4.0
ACCUMULATION_NOISE_FACTOR = 16
DEPTH_NOISE_FACTOR = 2
WORST_ROW_FLOOR_FACTOR = 2
COMPONENTWISE_FLOOR_FACTOR = 4
BUDGET_EXPONENT = 0.5
NO_BITS = 0.5
SHOWN_MISMATCHES = 5

METRICS: tuple[str, ...] = ("normwise", "worst_row", "componentwise")
_FLOOR_FACTORS = {
    "normwise": 1,
    "worst_row": WORST_ROW_FLOOR_FACTOR,
    "componentwise": COMPONENTWISE_FLOOR_FACTOR,
}


@dataclass(frozen=True)
class Constant:
    name: str
    value: str
    reasoning: str


CONSTANTS: tuple[Constant, ...] = (
    Constant(
        "RATIO_LIMIT",
        f"{RATIO_LIMIT:g}",
        "A candidate may be this many times less accurate than the baseline (or the noise "
        "floor). Different but sound summation orders and blockings change an error by up to "
        "about 2-3x; an error of 4x or more means lost precision, not a different order.",
    ),
    Constant(
        "unit roundoff u",
        "finfo(dtype).eps / 2",
        "The relative error of one correct rounding to the dtype: 2^-8 for bfloat16, 2^-11 for "
        "float16, 2^-24 for float32, 2^-53 for float64.",
    ),
    Constant(
        "accumulation unit u_acc",
        "u(float32) for outputs of 32 bits or fewer, u(float64) for float64",
        "Kernels accumulate low-precision results in float32; the noise of reordering such an "
        "accumulation is a few float32 roundings, independent of the output dtype.",
    ),
    Constant(
        "ACCUMULATION_NOISE_FACTOR",
        f"{ACCUMULATION_NOISE_FACTOR}",
        "floor_normwise = max(u_out, ACCUMULATION_NOISE_FACTOR * u_acc): a baseline that happens "
        "to be nearly exact (error below one rounding to the output, or below the reordering "
        "noise of a float32 accumulation over many terms) must not make an equally sound "
        "candidate look many times worse.",
    ),
    Constant(
        "flushed-terms allowance",
        "depth * finfo(accumulator).smallest_normal",
        "Subtracted from every element's absolute error, the accumulator being float32 (float64 "
        "for float64 results): GPUs flush subnormal terms to zero in atomics and fast-math "
        "paths, which can cost a sum up to one smallest normal per term. It only matters for "
        "results that are themselves near the bottom of the float32 range.",
    ),
    Constant(
        "DEPTH_NOISE_FACTOR",
        f"{DEPTH_NOISE_FACTOR}",
        "floor_normwise = max(u_out, u_acc * max(ACCUMULATION_NOISE_FACTOR, DEPTH_NOISE_FACTOR * "
        "sqrt(depth))), depth being how many terms a result sums (the product of the axes the "
        "inputs have and that result does not). The rounding error of a sound float32 sum grows "
        "with the square root of its length (a sum in atomics' arbitrary order included), so "
        "a 16384-term reduction may carry about 128 float32 roundings; TF32 or half-precision "
        "arithmetic stays far above this for any realistic depth.",
    ),
    Constant(
        "WORST_ROW_FLOOR_FACTOR",
        f"{WORST_ROW_FLOOR_FACTOR}",
        "floor_worst_row = 2 * floor_normwise: the worst of many rows fluctuates more than the "
        "whole result's error does.",
    ),
    Constant(
        "COMPONENTWISE_FLOOR_FACTOR",
        f"{COMPONENTWISE_FLOOR_FACTOR}",
        "floor_componentwise = 4 * floor_normwise: the single worst element fluctuates most; "
        "one rounding of the output already costs up to u_out per element.",
    ),
    Constant(
        "BUDGET_EXPONENT",
        f"{BUDGET_EXPONENT:g}",
        "budget_m = max(RATIO_LIMIT * floor_m, u_out ** BUDGET_EXPONENT): a result that lost more "
        "than half its significant bits fails whatever the baseline did, so a poor baseline "
        "cannot excuse a poor candidate. It never undercuts what the ratio rule allows at the "
        "floor.",
    ),
    Constant(
        "absolute floor A",
        "finfo(dtype).smallest_normal",
        "Where the truth is subnormal, each element's absolute error is reduced by A (never "
        "below zero): a difference no larger than what flushing subnormals to zero costs is "
        "not an error. Denominators are "
        "at least A (times sqrt(count) for norms), so a truth of about zero measures larger "
        "errors in units of A. (Dividing A by u instead would forgive float16 outputs below "
        "about 0.1 almost any error.)",
    ),
    Constant(
        "nudged case: s_m, n_m",
        "err_m(truth nudged, truth), err_m(baseline nudged, truth nudged)",
        "Asked only when a result fails on its error: every floating input element is moved "
        "by about one unit in the last place (signs from a fixed seed) and the truth and the "
        "baseline computed again. floor_m becomes at least s_m and n_m, budget_m at least "
        "RATIO_LIMIT * s_m. Where a case cancels down to rounding residue (a softmax backward "
        "with a constant upstream gradient) the truth is only defined to within s_m; where "
        "its structure makes the baseline exact (a constant row's zero variance), n_m is the "
        "error a correct kernel makes on a case just like it. The baseline's error never "
        "widens the budget, nearby or not. Well-conditioned cases change nothing.",
    ),
    Constant(
        "NO_BITS",
        f"{NO_BITS:g}",
        "Where s_m >= NO_BITS (the truth moves by half its size or more when the inputs move by "
        "one rounding: not even its leading bit is set by its inputs), the result has no "
        "significant bits to lose and budget_m does not apply: only the ratio rule judges it. "
        "A result that cancels to zero whatever the inputs (the gradient of an attention's key "
        "bias, which softmax's shift invariance makes zero) is rounding residue in float64 as in "
        "float32; measured against a truth of about 1e-15, a correct float32 kernel's residue "
        "is 1e9 times the truth, and so is the baseline's.",
    ),
    Constant(
        "SHOWN_MISMATCHES",
        f"{SHOWN_MISMATCHES}",
        "How many mismatching positions a failure lists, in row-major order.",
    ),
)


def noise_floor(metric: str, dtype: torch.dtype, depth: int = 1) -> float:
    """The smallest baseline error a ratio is taken against, for a result of `dtype` that sums
    up to `depth` terms."""
    accumulation = unit_roundoff(torch.float32 if dtype.itemsize <= 4 else dtype)
    reordering = max(ACCUMULATION_NOISE_FACTOR, DEPTH_NOISE_FACTOR * math.sqrt(max(depth, 1)))
    normwise = max(unit_roundoff(dtype), reordering * accumulation)
    return _FLOOR_FACTORS[metric] * normwise


def budget(
    metric: str, dtype: torch.dtype, ratio_limit: float = RATIO_LIMIT, depth: int = 1
) -> float:
    """The largest error a result of `dtype` may have for `metric`, whatever the baseline's."""
    floor = noise_floor(metric, dtype, depth)
    return max(ratio_limit * floor, unit_roundoff(dtype) ** BUDGET_EXPONENT)


@dataclass(frozen=True)
class MetricResult:
    """One metric of a floating comparison."""

    metric: str
    candidate: float
    baseline: float
    floor: float
    error_ratio: float
    budget: float
    ratio_limit: float
    sensitivity: float = 0.0
    """How far the truth moves when the inputs move by one rounding (0: not measured); the
    floor and the budget are at least that and `ratio_limit` times that."""
    nearby: float = 0.0
    """The baseline's error on the case with its inputs moved by one rounding (0: not
    measured); the floor is at least that."""

    @property
    def passed(self) -> bool:
        return self.error_ratio <= self.ratio_limit and self.candidate <= self.budget
