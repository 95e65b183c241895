"""Batch invariance: a row computed alone must equal the same row computed inside a batch.

Kernels often take another path for a batch of one (a split reduction to fill the GPU, another
tile size, another dtype), so a request served alone gets other numbers than the same request
served with others. For each batch axis (`kernelaudit.inputs.batch`) a probe runs a boundary
case whole, then its last row and a middle row alone. Under `Contract(batch_invariant=True)`
any bit of difference fails; otherwise each row alone is held to the error budget and a bit
difference is a note.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

import torch

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe, RunPlan, Step
from kernelaudit.checks.numerics import judge_results
from kernelaudit.checks.sweep import shapes_for
from kernelaudit.inputs.batch import (
    axis_position,
    batch_axes,
    inference_skipped,
    result_shapes,
)
from kernelaudit.inputs.case import Case
from kernelaudit.runner.boundary.guard import same_elements

_SAME_SIZE_INTEGERS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class BatchInvariance:
    name: ClassVar[str] = "batch-invariance"
    summary: ClassVar[str] = (
        "a row computed alone equals the same row computed inside a batch: bit for bit where "
        "the contract says batch_invariant, within the error budget otherwise"
    )

    def not_applicable(self, ctx: PlanContext) -> str:
        if batch_axes(ctx.problem):
            return ""
        skipped = inference_skipped(ctx.problem)
        if skipped:
            return f"no batch axis known: {skipped}"
        return "the problem has no batch axis (rows computed independently of each other)"

    def plan(self, ctx: PlanContext) -> list[Probe]:
        profile = ctx.profile
        configs = len(ctx.problem.dtype_configs())
        configs = min(configs, profile.invariance_configs or configs)
        axes = batch_axes(ctx.problem)
        probes = []
        for axis in axes[: profile.invariance_axes or len(axes)]:
            whole = _whole_case(ctx, axis)
            if whole is None:
                continue
            size = whole.size_map()[axis]
            at = {"last": size - 1, "middle": size // 2}
            rows = tuple(at[r] for r in profile.invariance_rows)
            for config in range(configs):
                case = replace(whole, dtype_config=config)
                alone = tuple(
                    Step(case=case.with_rows(axis, row, row + 1, f"{case.label}, {axis} row alone"))
                    for row in dict.fromkeys(rows)
                )
                probes.append(Probe(self.name, case, RunPlan(steps=(Step(), *alone))))
        return probes

    def judge(self, observation: Observation) -> list[Failure]:
        result = observation.result
        steps = observation.probe.plan.sequence()
        if observation.probe.check != self.name or result.error or len(result.calls) < len(steps):
            return []
        # the last row and the middle one often fail alike: the worse of them stands for both
        worst: dict[str, Failure] = {}
        for call, step in enumerate(steps):
            window = None if step.case is None else step.case.row_window()
            for failure in _judge_alone(observation, call, window) if window else ():
                if failure.key not in worst or failure.score > worst[failure.key].score:
                    worst[failure.key] = failure
        return list(worst.values())

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []


def _whole_case(ctx: PlanContext, axis: str) -> Case | None:
    """The case the rows are cut from: the axis at its smallest boundary size of at least 2
    rows, or at the first workload's size."""
    shapes = shapes_for(ctx)
    boundary = [
        (sizes, label)
        for sizes, label in shapes
        if label == f"boundary {axis}={sizes.get(axis)}" and sizes[axis] >= 2
    ]
    if boundary:
        sizes, label = min(boundary, key=lambda item: item[0][axis])
    elif shapes and shapes[0][0].get(axis, 0) >= 2:
        sizes, label = shapes[0]
    else:
        return None
    return Case(tuple(sizes.items()), label=label)


def _judge_alone(
    observation: Observation, call: int, window: tuple[str, int, int]
) -> list[Failure]:
    problem = observation.problem
    axis, start, stop = window
    batch = observation.probe.case.size_map().get(axis, 0)
    where = f"{axis}[{start}]" if stop == start + 1 else f"{axis}[{start}:{stop}]"
    setting = (("axis", axis), ("row", start), ("batch size", batch))
    whole = observation.aligned(observation.result.calls[0].outputs, 0)
    alone = observation.aligned(observation.result.calls[call].outputs, call)
    names = observation.expected_at(call).names
    shapes = result_shapes(problem)
    exact = problem.contract.batch_invariant
    failures: list[Failure] = []
    if not exact:
        for failure in judge_results(observation, call):
            failures.append(
                Failure(
                    key=f"alone-{failure.key}",
                    title=f"{where} computed alone: {failure.title}",
                    evidence=(*setting, *failure.evidence),
                    score=failure.score,
                )
            )
    failed = {f.key.split(":", 1)[-1] for f in failures}
    for k, name in enumerate(names[: min(len(whole), len(alone))]):
        position = axis_position(shapes[k], axis) if k < len(shapes) else None
        if position is None or name in failed or whole[k].dim() <= position:
            continue
        if whole[k].shape[position] < stop:
            continue  # a batch result of the wrong shape: the numerics check reports it
        rows = whole[k].narrow(position, start, stop - start)
        if rows.shape != alone[k].shape or rows.dtype != alone[k].dtype:
            if exact:
                failures.append(
                    Failure(
                        key=f"batch-variant-shape:{name}",
                        title=f"{name!r}: {where} computed alone has shape "
                        f"{tuple(alone[k].shape)} {alone[k].dtype}, the same rows of the batch "
                        f"{tuple(rows.shape)} {rows.dtype}",
                        evidence=(*setting, ("output", name)),
                    )
                )
            continue
        differ = ~_same_bits(alone[k], rows)
        count = int(differ.sum())
        if not count:
            continue
        first = [int(i) for i in differ.nonzero()[0]]
        first[position] += start
        gap = (alone[k].double() - rows.double()).abs()[differ].nan_to_num(float("inf"))
        largest = float(gap.max())
        evidence = (
            *setting,
            ("output", name),
            ("differing elements", count),
            ("first index", tuple(first)),
            ("largest difference", largest),
        )
        title = (
            f"{name!r}: {where} computed alone differs from the same row in a batch of {batch} "
            f"in {count} of {rows.numel()} elements (largest difference {largest:.3g})"
        )
        if exact:
            failures.append(
                Failure(
                    key=f"batch-variant:{name}",
                    title=title,
                    evidence=evidence,
                    score=count / max(rows.numel(), 1),
                )
            )
        else:
            failures.append(
                Failure(
                    key=f"batch-variant-bits:{name}",
                    title=f"{title}; within the error budget, and the problem does not declare "
                    "batch_invariant",
                    evidence=evidence,
                    severity="note",
                )
            )
    return failures


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise: the same bits (any NaN counts as the same as any other NaN)."""
    integers = _SAME_SIZE_INTEGERS.get(a.element_size())
    if not a.is_floating_point() or integers is None:
        return same_elements(a, b)
    same = a.contiguous().view(integers) == b.contiguous().view(integers)
    return same | (a.isnan() & b.isnan())
