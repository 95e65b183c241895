"""Numerics sweep: every result of every case compared with fp64 truth by the oracle's rule."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, ClassVar

import torch

from kernelaudit.checks.base import Expected, Failure, Judged, Observation, PlanContext, Probe
from kernelaudit.checks.sweep import numerics_cases
from kernelaudit.oracle.compare import Comparison, compare, judging_device
from kernelaudit.oracle.conditioning import Nudged
from kernelaudit.oracle.metrics import row_errors, row_squared_errors
from kernelaudit.oracle.mismatches import locate
from kernelaudit.problem.spec import IndexInput
from kernelaudit.runner.boundary.guard import same_bits

_TOP_ROWS = 5
_JUDGEMENTS_KEPT = 4
"""Judged calls of one observation kept to compare later calls' bytes with: enough for the
call alone and a few distinct results of the repeats, without comparing every repeat with
every other."""


class Numerics:
    name: ClassVar[str] = "numerics"
    summary: ClassVar[str] = (
        "outputs match fp64 truth within the error-ratio rule across distributions, shapes, "
        "layouts and dtypes"
    )

    def plan(self, ctx: PlanContext) -> list[Probe]:
        return [Probe(self.name, case, rank=rank) for case, rank in numerics_cases(ctx)]

    def judge(self, observation: Observation) -> list[Failure]:
        if observation.probe.check != self.name or observation.result.error:
            return []
        return judge_results(observation, call=0)

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []


def judge_results(
    observation: Observation, call: int, outputs: tuple[torch.Tensor, ...] | None = None
) -> list[Failure]:
    """Compare one call's results (or `outputs` in place of the call's own) with the expected
    ones for that call's case (`compare_expected`); one failure per failing result."""
    expected = observation.expected_at(call)
    values = observation.aligned(
        observation.result.calls[call].outputs if outputs is None else outputs, call
    )
    if len(values) < len(expected.names):
        return []  # the execution check reports a wrong number of outputs
    inputs = observation.inputs_at(call)
    for earlier in observation.judged:
        same_case = earlier.expected is expected and earlier.inputs is inputs
        if same_case and _same(earlier.results, values):
            return list(earlier.failures)  # the same case and the same bytes: the same judgement
    failures = []
    where = judging_device(observation.device)
    for k, name in enumerate(expected.names):
        comparison = compare_expected(expected, k, values[k], where)
        if comparison.passed:
            continue
        rows = _row_evidence(observation, call, k, name, values[k], expected.truth[k])
        result, reason, metrics = comparison_evidence(comparison)
        evidence = (result, reason, *rows, metrics)
        if comparison.failure in _LOCATED:
            evidence += _nonfinite_where_finite(values[k], expected.truth[k])
        failures.append(
            Failure(
                key=f"{comparison.failure}:{name}",
                title=comparison.reason,
                evidence=evidence,
                score=_score(comparison),
            )
        )
    if len(observation.judged) < _JUDGEMENTS_KEPT:
        observation.judged.append(Judged(expected, inputs, values, tuple(failures)))
    return failures


_LOCATED = ("nan-where-finite", "inf-where-finite")
"""Failures whose elements are located in the evidence (where they lie: a region of the
output a report can draw)."""


def _nonfinite_where_finite(
    values: torch.Tensor, truth: torch.Tensor
) -> tuple[tuple[str, Any], ...]:
    """Where the result is NaN or infinite and the truth is finite: count, first indices and
    the span of each dimension (as the unwritten check locates unwritten elements)."""
    if values.shape != truth.shape or not values.is_floating_point() or values.dim() == 0:
        return ()
    mask = ~torch.isfinite(values.to(truth.device)) & torch.isfinite(truth)
    return locate(mask) if bool(mask.any()) else ()


def _same(kept: tuple[torch.Tensor, ...], values: tuple[torch.Tensor, ...]) -> bool:
    return len(kept) == len(values) and all(
        a.device == b.device and same_bits(a, b) for a, b in zip(kept, values, strict=True)
    )


def compare_expected(
    expected: Expected,
    k: int,
    values: torch.Tensor,
    where: torch.device,
    rows: tuple[int, torch.Tensor] | None = None,
) -> Comparison:
    """Result `k` of a case compared with its truth and baseline; a result failing on its
    error is judged again with the case's inputs moved by one rounding (`oracle.conditioning`),
    computed then and kept with the case. `rows`, (dim, indices): only those rows of `values`
    (which then holds every row of the result) and of the case's results are compared."""
    name, truth = expected.names[k], expected.truth[k]
    undefined = expected.undefined_where_nan and values.shape == truth.shape
    if undefined and truth.is_floating_point() and values.is_floating_point():
        # rows the reference leaves undefined (its truth NaN) accept any value
        values = values.masked_fill(torch.isnan(truth).to(values.device), math.nan)

    def picked(tensor: torch.Tensor) -> torch.Tensor:
        if rows is None:
            return tensor
        return tensor.index_select(rows[0], rows[1].to(tensor.device))

    arguments = (name, picked(values), picked(truth), picked(expected.baseline[k]))
    arguments += (expected.dtypes[k],)
    # what is kept for the whole result (the baseline's figures, the choices of an integer
    # result) does not hold for some of its rows
    memo = expected.memo if rows is None else None
    selection = expected.selection(k) if rows is None else None
    comparison = compare(
        *arguments, depth=expected.depth(k), device=where, memo=memo, selection=selection
    )
    if comparison.failure == "error":
        # before failing on its error: does the precision allow better on this case?
        nudged = expected.nudged()
        if nudged is not None:
            moved = Nudged(picked(nudged[k].truth), picked(nudged[k].baseline))
            comparison = compare(
                *arguments, depth=expected.depth(k), device=where, memo=memo, nudged=moved
            )
        elif expected.not_nudged:
            said = (("case nudged by one rounding", f"not made: {expected.not_nudged}"),)
            comparison = replace(comparison, metrics=comparison.metrics + said)
    return comparison


def comparison_evidence(comparison: Comparison) -> tuple[tuple[str, Any], ...]:
    return (
        ("result", comparison.name),
        ("reason", comparison.reason),
        ("metrics", dict(comparison.metrics)),
    )


def _score(comparison: Comparison) -> float:
    return max((m.error_ratio for m in comparison.errors), default=1.0)


def _row_evidence(
    observation: Observation,
    call: int,
    k: int,
    name: str,
    values: torch.Tensor,
    truth: torch.Tensor,
) -> tuple[tuple[str, Any], ...]:
    """The rows with the largest error and, where the output's rows are indexed by an index
    input, how often each of those rows' ids occurs in it."""
    if values.shape != truth.shape or not values.dtype.is_floating_point or values.dim() < 2:
        return ()
    errors = row_errors(values, truth, depth=observation.expected_at(call).depth(k))
    if errors.numel() < 2:
        return ()
    top = torch.topk(errors.nan_to_num(float("inf")), min(_TOP_ROWS, errors.numel()))
    rows: list[dict[str, Any]] = [
        {"row": int(r), "error": float(e)}
        for e, r in zip(top.values, top.indices, strict=True)
        if e > 0
    ]
    if not rows:
        return ()
    # a chunk of rows at a time: float64 copies of a video patch embedding's result whole (5.3 G
    # elements) had the auditor killed for memory while it told where a failure was
    squared = row_squared_errors(values, truth)
    total = float(squared.sum())
    evidence: list[tuple[str, Any]] = []
    if total > 0:
        share = float(squared[[row["row"] for row in rows]].sum()) / total
        evidence.append((f"share of squared error in the {len(rows)} worst rows", round(share, 4)))
    counts = (
        _row_multiplicity(observation, call, name, values.shape[0]) if values.dim() == 2 else None
    )
    if counts is not None:
        for row in rows:
            row["id_count"] = int(counts[row["row"]])
        nonzero = counts[counts > 0].float()
        evidence.append(
            (
                "id counts",
                {
                    "median count of used ids": float(nonzero.median()) if nonzero.numel() else 0.0,
                    "max count": int(counts.max()),
                },
            )
        )
        evidence.append(("error by id count", _by_id_count(errors, counts)))
    evidence.insert(0, ("worst rows", rows))
    return tuple(evidence)


def _by_id_count(errors: torch.Tensor, counts: torch.Tensor) -> list[dict[str, Any]]:
    """Every row's error, binned by how often its id occurs (1, 2-3, 4-7, ...: powers of two):
    per bin the rows, and their median and largest error. Whether the error grows with the
    count is the mark of a sum carried in too low a precision."""
    counts, errors = counts.cpu(), errors.double().cpu()
    used = counts > 0
    if not bool(used.any()):
        return []
    bins = torch.floor(torch.log2(counts[used].double())).long()
    errors = errors[used].nan_to_num(float("inf"))
    table = []
    for b in range(int(bins.max()) + 1):
        these = errors[bins == b]
        if these.numel():
            low, high = 1 << b, (2 << b) - 1
            table.append(
                {
                    "ids occurring": str(low) if low == high else f"{low}-{high}",
                    "rows": int(these.numel()),
                    "median error": float(these.median()),
                    "max error": float(these.max()),
                }
            )
    return table


def _row_multiplicity(
    observation: Observation, call: int, name: str, rows: int
) -> torch.Tensor | None:
    """Occurrences of each row id when an index input is bound to the output's row axis."""
    problem = observation.problem
    output = next((o for o in problem.outputs if o.name == name), None)
    if output is None or not output.shape or not isinstance(output.shape[0], str):
        return None
    for inp in problem.inputs:
        if isinstance(inp, IndexInput) and inp.bound == output.shape[0]:
            ids = observation.inputs_at(call)[inp.name]
            if isinstance(ids, torch.Tensor) and ids.numel():
                return torch.bincount(ids.flatten().long(), minlength=rows)[:rows]
    return None
