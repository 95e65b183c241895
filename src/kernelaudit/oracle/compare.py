"""One comparison per output kind, chosen in one place, each ending in a verdict with numbers.

Floating results are judged against the fp64 truth relative to the native-precision baseline:
`error_ratio = err(candidate) / max(err(baseline), floor)` for three metrics (see
`kernelaudit.oracle.metrics`), with an absolute budget a poor baseline cannot stretch, after the
non-finite pattern is checked, and bit for bit where the truth is exactly representable and the
baseline reproduces it. Integer and bool results must equal the truth exactly, but for indices
the reference chose by comparing floats, which may select a score tied with the truth's
(`oracle.selection`). Every constant
is in `kernelaudit.oracle.rule.CONSTANTS`, with the reason for its value; docs/oracle.md
explains the rule.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from kernelaudit.device_copies import DEVICE_COPIES, moved
from kernelaudit.inputs.case import dtype_name
from kernelaudit.oracle.conditioning import Nudged
from kernelaudit.oracle.metrics import ErrorMetrics, all_clean, error_metrics, float64_sum
from kernelaudit.oracle.mismatches import (
    Mismatch,
    Value,
    bit_exact_applies,
    bit_exact_mismatches,
    count_true,
    first_mismatches,
    no_nonfinite_mismatches,
    nonfinite_pattern,
    unravel,
)
from kernelaudit.oracle.reasons import bit_exact_reason, error_reason, listing, nonfinite_reason
from kernelaudit.oracle.rule import (
    METRICS,
    NO_BITS,
    RATIO_LIMIT,
    MetricResult,
    budget,
    noise_floor,
)
from kernelaudit.oracle.selection import Selection, ties


@dataclass(frozen=True)
class Comparison:
    """The verdict on one result.

    failure: "" when passed, else a short key for grouping: "shape", "dtype",
        "nan-where-finite", "inf-where-finite", "wrong-where-nan", "wrong-where-inf",
        "wrong-where-overflow", "error", "bit-exact" or "mismatch".
    metrics: a JSON-able summary of every number below.
    """

    name: str
    kind: Literal["floating", "exact"]
    passed: bool
    reason: str = ""
    failure: str = ""
    metrics: tuple[tuple[str, Value], ...] = ()
    errors: tuple[MetricResult, ...] = ()
    worst_row: int | None = None
    worst_element: tuple[int, ...] | None = None
    worst_candidate: float | None = None
    worst_truth: float | None = None
    mismatches: tuple[Mismatch, ...] = ()
    """The first few positions that failed (non-finite pattern, bit-exact rule, exact kind)."""


@dataclass(frozen=True)
class BaselineJudgement:
    """What a comparison learns from the truth and the baseline alone, the same for every
    result compared with them: kept per case (`Memo`) so checks that judge one case several
    times compute it once."""

    error: ErrorMetrics
    bit_exact: bool
    """Whether the bit-exact rule applies: the truth is exactly representable at every
    compared position and the baseline reproduces it."""


Memo = dict[str, BaselineJudgement]
"""Baseline judgements of one case, by result name."""


def compare(
    name: str,
    values: torch.Tensor,
    truth: torch.Tensor,
    baseline: torch.Tensor,
    dtype: torch.dtype,
    ratio_limit: float = RATIO_LIMIT,
    depth: int = 1,
    device: str | torch.device | None = None,
    memo: Memo | None = None,
    nudged: Nudged | None = None,
    selection: Selection | None = None,
) -> Comparison:
    """Judge a candidate's result `values` against the fp64 `truth` and the native `baseline`.

    `dtype` is the dtype the result must have; `depth` how many terms it may sum (see
    `noise_floor`). The arithmetic runs on `device` (where `truth` is when None): on a GPU the
    three tensors are moved there once (the truth and baseline taken from the copies kept
    there, `device_copies`, where there are some), the result and the baseline at their own
    dtype, widened to float64 there (`_widened`), and only the figures come back.
    `memo` keeps what the truth and baseline alone decide, by `name`, for later comparisons
    against the same ones.
    `nudged` is this result on the case with every input moved by one rounding
    (`oracle.conditioning`): where given, the result is judged against how far the truth moved
    and the baseline's error there too, as against the baseline's error here. `selection`: for
    an integer result the reference chose by comparing floats, what it selects from
    (`oracle.selection`): an index whose score ties with the truth's is accepted. Never raises
    on a bad result: a wrong shape or dtype is a failed comparison.
    """
    kind: Literal["floating", "exact"] = "exact" if is_exact(dtype) else "floating"
    if tuple(values.shape) != tuple(truth.shape):
        reason = f"{name} has shape {tuple(values.shape)}, expected {tuple(truth.shape)}"
        return Comparison(name, kind, passed=False, reason=reason, failure="shape")
    if values.dtype != dtype:
        reason = f"{name} is {dtype_name(values.dtype)}, expected {dtype_name(dtype)}"
        return Comparison(name, kind, passed=False, reason=reason, failure="dtype")
    where = torch.device(device) if device is not None else truth.device
    judge = _COMPARISONS[kind]
    if selection is not None and kind == "exact":
        judge = functools.partial(_compare_exact, selection=selection)
    arguments = (name, values, truth, baseline, dtype, ratio_limit, depth)
    try:
        return judge(*arguments, where, memo, nudged)
    except torch.cuda.OutOfMemoryError:
        if where.type != "cuda":
            raise
        # the device is full (the candidate's worker holds most of it): judge on the host
        DEVICE_COPIES.clear()
        torch.cuda.empty_cache()
        return judge(*arguments, torch.device("cpu"), memo, nudged)


def judging_device(device: str) -> torch.device:
    """Where results of a candidate that ran on `device` are judged: on its GPU, where the
    float64 arithmetic is fast and the host's cores stay free; on the host otherwise."""
    where = torch.device(device)
    return where if where.type == "cuda" and torch.cuda.is_available() else torch.device("cpu")


def is_exact(dtype: torch.dtype) -> bool:
    """Whether results of `dtype` are compared exactly (integer and bool) or by error."""
    return not (dtype.is_floating_point or dtype.is_complex)


def _compare_exact(
    name: str,
    values: torch.Tensor,
    truth: torch.Tensor,
    baseline: torch.Tensor,
    dtype: torch.dtype,
    ratio_limit: float,
    depth: int,
    where: torch.device,
    memo: Memo | None,
    nudged: Nudged | None,
    selection: Selection | None = None,
) -> Comparison:
    del depth, memo, nudged  # exact results have no rounding noise, and nothing worth keeping
    values = values.to(where)
    truth, baseline = DEVICE_COPIES.on(truth, where), DEVICE_COPIES.on(baseline, where)
    differ = values != truth
    tied = (
        torch.zeros_like(differ) if selection is None else ties(values, truth, selection, baseline)
    )
    differ &= ~tied
    count, baseline_count, tied_count = torch.stack(
        [count_true(m) for m in (differ, baseline != truth, tied)]
    ).tolist()
    metrics = (
        ("mismatches", count),
        ("baseline_mismatches", baseline_count),
        ("elements", values.numel()),
    )
    if selection is not None:
        # indices the truth would not pick, selecting scores tied with those it picks
        metrics += (("tied_selections", tied_count), ("tie_tolerance", selection.tolerance))
    if count == 0:
        return Comparison(name, "exact", passed=True, metrics=metrics)
    shown = first_mismatches(differ, values, truth)
    reason = (
        f"{count} of {values.numel()} elements of {name} differ from the truth ({listing(shown)})"
    )
    if baseline_count:
        reason += f"; the baseline differs at {baseline_count} too, so rounding decides this result"
    return Comparison(
        name,
        "exact",
        passed=False,
        reason=reason,
        failure="mismatch",
        metrics=metrics,
        mismatches=shown,
    )


def _compare_floating(
    name: str,
    values: torch.Tensor,
    truth: torch.Tensor,
    baseline: torch.Tensor,
    dtype: torch.dtype,
    ratio_limit: float,
    depth: int,
    where: torch.device,
    memo: Memo | None,
    nudged: Nudged | None,
) -> Comparison:
    if dtype.is_complex:
        values, truth, baseline = (_interleaved(t) for t in (values, truth, baseline))
        if nudged is not None:
            nudged = Nudged(_interleaved(nudged.truth), _interleaved(nudged.baseline))
        dtype = dtype.to_real()
    candidate = _widened(moved(values, where))
    truth = DEVICE_COPIES.on(truth, where, torch.float64)

    clean = all_clean(candidate, truth, dtype)
    if clean:  # nearly every comparison: nothing non-finite, nothing beyond the dtype's range
        pattern = no_nonfinite_mismatches()
        compared_truth = truth
    else:
        overflow = torch.isfinite(truth) & (truth.abs() > torch.finfo(dtype).max)
        pattern = nonfinite_pattern(candidate, truth, overflow, dtype, lambda: baseline)
        # positions where the truth overflows the dtype are judged by the pattern alone
        beyond = bool(overflow.any())
        compared_truth = truth.masked_fill(overflow, math.nan) if beyond else truth

    measured = error_metrics(candidate, compared_truth, dtype, depth, clean)
    judged = memo.get(name) if memo is not None else None
    if judged is None:
        reference = _widened(DEVICE_COPIES.on(baseline, where))
        clean_reference = clean and math.isfinite(float(float64_sum(reference)))
        judged = BaselineJudgement(
            error=error_metrics(reference, compared_truth, dtype, depth, clean_reference),
            bit_exact=bit_exact_applies(reference, compared_truth, dtype),
        )
        del reference
        if memo is not None:
            memo[name] = judged
    nudge = _nudged_metrics(nudged, compared_truth, dtype, depth, where)
    results = tuple(
        _judge(m, measured, judged.error, nudge, dtype, ratio_limit, depth) for m in METRICS
    )
    exact = bit_exact_mismatches(candidate, compared_truth, dtype) if judged.bit_exact else None
    exact_count = int(count_true(exact)) if exact is not None else 0

    worst = unravel(measured.worst_element_index, candidate.shape)
    summary: list[tuple[str, Value]] = []
    for r in results:
        summary += [
            (r.metric, r.candidate),
            (f"{r.metric}_baseline", r.baseline),
            (f"{r.metric}_floor", r.floor),
            (f"{r.metric}_error_ratio", r.error_ratio),
            (f"{r.metric}_budget", r.budget),
        ]
        if nudge is not None:
            summary.append((f"{r.metric}_sensitivity", r.sensitivity))
            summary.append((f"{r.metric}_nearby", r.nearby))
    summary += [("worst_row_index", measured.worst_row_index), ("compared", measured.compared)]
    summary += [(key, count) for key, count, _ in pattern]
    if exact is not None:
        summary.append(("bit_exact_mismatches", exact_count))
    failing = [(key, count, shown) for key, count, shown in pattern if count]
    failed = [r for r in results if not r.passed]
    reason, failure = "", ""
    shown: tuple[Mismatch, ...] = ()
    if failing:
        reason, failure, shown = nonfinite_reason(name, failing), failing[0][0], failing[0][2]
    elif failed:
        reason, failure = error_reason(name, failed, measured, worst, dtype), "error"
    elif exact is not None and exact_count:
        shown = first_mismatches(exact, candidate, truth)
        reason, failure = bit_exact_reason(name, exact_count, shown), "bit-exact"
    return Comparison(
        name=name,
        kind="floating",
        passed=not failure,
        reason=reason,
        failure=failure,
        metrics=tuple(summary),
        errors=results,
        worst_row=measured.worst_row_index,
        worst_element=worst,
        worst_candidate=measured.worst_element_value,
        worst_truth=measured.worst_element_truth,
        mismatches=shown,
    )


WIDENED_WHOLE_ELEMENTS = 1 << 26
"""Results of up to this many elements are widened to float64 whole before they are compared
(512 MiB at most), larger ones a chunk at a time as each pass reads them
(`oracle.metrics.float64_chunks`): whole float64 copies of a video patch embedding's result
and baseline (5.3 G elements, 42 GB each) filled the GPU, and the host where judging fell back
to it, and the auditor was killed for memory. Read once rather than in every pass, a result of
33 M elements is judged in 1.8-1.9 s instead of 2.3 s on a 2-core host."""


def _widened(values: torch.Tensor) -> torch.Tensor:
    """`values` in float64 up to `WIDENED_WHOLE_ELEMENTS`, else at its own dtype, contiguous
    (read flat, a chunk at a time)."""
    if values.numel() <= WIDENED_WHOLE_ELEMENTS:
        return values.to(torch.float64)
    return values.contiguous()


_COMPARISONS: dict[str, Callable[..., Comparison]] = {
    "exact": _compare_exact,
    "floating": _compare_floating,
}


def _nudged_metrics(
    nudged: Nudged | None,
    truth: torch.Tensor,
    dtype: torch.dtype,
    depth: int,
    where: torch.device,
) -> tuple[ErrorMetrics, ErrorMetrics] | None:
    """How far the truth moved, and the baseline's error on the nudged case, as metrics."""
    if nudged is None or nudged.truth.shape != truth.shape:
        return None
    moved = DEVICE_COPIES.on(nudged.truth, where, torch.float64)
    overflow = torch.isfinite(moved) & (moved.abs() > torch.finfo(dtype).max)
    moved_truth = moved.masked_fill(overflow, math.nan) if bool(overflow.any()) else moved
    sensitivity = error_metrics(moved, truth, dtype, depth)
    reference = _widened(DEVICE_COPIES.on(nudged.baseline, where))
    nearby = error_metrics(reference, moved_truth, dtype, depth)
    return sensitivity, nearby


def _judge(
    metric: str,
    candidate: ErrorMetrics,
    baseline: ErrorMetrics,
    nudged: tuple[ErrorMetrics, ErrorMetrics] | None,
    dtype: torch.dtype,
    ratio_limit: float,
    depth: int,
) -> MetricResult:
    c, b = getattr(candidate, metric), getattr(baseline, metric)
    s, n = (getattr(m, metric) for m in nudged) if nudged is not None else (0.0, 0.0)
    # nan (nothing finite to compare) never raises a floor: max keeps its first argument
    floor = max(noise_floor(metric, dtype, depth), s, n)
    # how far the truth itself moves widens the budget; the baseline's error, here or nearby,
    # never does: a poor reference does not excuse a poor candidate. A truth that moves by
    # half its size or more has no significant bits to lose (a result that cancels to
    # rounding residue in any precision, as an attention's key-bias gradient does): only the
    # ratio judges it.
    limit = (
        math.inf
        if s >= NO_BITS
        else max(budget(metric, dtype, ratio_limit, depth), ratio_limit * s)
    )
    return MetricResult(
        metric=metric,
        candidate=c,
        baseline=b,
        floor=floor,
        error_ratio=c / max(b, floor),
        budget=limit,
        ratio_limit=ratio_limit,
        sensitivity=s,
        nearby=n,
    )


def _interleaved(t: torch.Tensor) -> torch.Tensor:
    """A complex tensor as real numbers, real and imaginary parts alternating in the last dim."""
    real = torch.view_as_real(t.resolve_conj())
    return real.reshape(*t.shape[:-1], -1) if t.dim() else real
