"""Gradient checks: a backward judged against fp64 truth under the upstream gradients and
accumulation depths training produces, not the ones verifiers pass.

A backward problem is either declared (inputs with role "upstream", saved tensors produced by
its forward) or derived from an autograd-enabled forward op (`Contract(gradients=...)`, see
`kernelaudit.problem.backward`). Either way its cases vary the upstream gradient per element
and present it transposed, strided, stride-0 and broadcast as from `loss.sum().backward()`,
also as all ones (the verifiers' habit, which hides a backward that reads one element of it
for all), draw index inputs Zipf-like and single-hot, lengthen the axes a gradient reduces
over, and exercise every mode of every argument that has choices.
"""

from __future__ import annotations

import math
from typing import ClassVar

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe
from kernelaudit.checks.numerics import judge_results
from kernelaudit.checks.sweep import (
    MORE_WORKLOAD_VALUES,
    affordable,
    base_workload,
    workloads_cheap,
)
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import case_elements
from kernelaudit.inputs.layouts import geometry
from kernelaudit.problem.backward import has_upstream
from kernelaudit.problem.dims import resolve_shape
from kernelaudit.problem.spec import Axis, IndexInput, Problem, ScalarInput, TensorInput

UPSTREAM_LAYOUTS = ("transposed", "strided", "expanded", "broadcast")
"""How autograd hands a backward its upstream gradient besides contiguous: the gradient of a
transpose or a slice, of a broadcast along one axis, of `loss.sum()`."""

DEEP_INDEX_DISTRIBUTIONS = ("zipf", "hot")
"""Index draws that pile many contributions onto a few rows of a gradient."""

_DEEP_ELEMENTS = {"cpu": 1 << 22, "cuda": 1 << 26}
"""The most elements any tensor of a lengthened case may hold, by device type."""


class Gradients:
    name: ClassVar[str] = "gradients"
    summary: ClassVar[str] = (
        "a backward matches fp64 truth under per-element, non-contiguous, transposed, stride-0 "
        "and all-ones upstream gradients, deep accumulation and every argument mode"
    )

    def not_applicable(self, ctx: PlanContext) -> str:
        if has_upstream(ctx.problem) or ctx.problem.contract.gradients:
            return ""  # a backward, or an autograd op whose derived backward is audited
        return (
            "the problem takes no upstream gradient and declares no autograd backward "
            "(Contract(gradients=...))"
        )

    def plan(self, ctx: PlanContext) -> list[Probe]:
        if not has_upstream(ctx.problem):
            return []  # a forward op: the engine audits its derived backward separately
        return [Probe(self.name, case, rank=rank) for case, rank in gradient_cases(ctx)]

    def judge(self, observation: Observation) -> list[Failure]:
        if observation.probe.check != self.name or observation.result.error:
            return []
        shown = upstream_description(observation.problem, observation.probe.case)
        return [
            Failure(
                key=failure.key,
                title=f"{failure.title} (upstream gradient: {shown})",
                evidence=(("upstream gradient", shown), *failure.evidence),
                score=failure.score,
            )
            for failure in judge_results(observation, call=0)
        ]

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []


def gradient_cases(ctx: PlanContext) -> list[tuple[Case, int]]:
    """Per dtype configuration, at every workload: per-element upstream gradients, all-ones
    upstream gradients, Zipf and hot index draws, every argument mode, and the reduced axes
    lengthened; at the base workload (`base_workload`) and first configuration, every upstream
    layout. Each with its rank (`Probe.rank`): where the workloads are cheap, the first, the
    smallest and the largest workload's cases always run; otherwise the base workload's, and
    the first, smallest and largest workloads at per-element upstream gradients; the others
    while the budget allows."""
    problem, profile = ctx.problem, ctx.profile
    upstream = [i for i in problem.inputs if isinstance(i, TensorInput) and i.role == "upstream"]
    indices = [i for i in problem.inputs if isinstance(i, IndexInput)]
    modes = [i for i in problem.inputs if isinstance(i, ScalarInput) and i.choices]
    by_size = sorted(problem.workloads, key=lambda w: case_elements(problem, w.as_dict()))
    sampled = {
        w.name
        for w in (problem.workloads[0], by_size[0], by_size[-1])
        if w is by_size[0] or affordable(ctx, w.as_dict())
    }
    # cheap workloads: every case at the first, the smallest and the largest; otherwise every
    # case at the workload the other checks depart from, the sampled ones at default values
    thorough = sampled if workloads_cheap(ctx) else {base_workload(ctx)}
    ranked: dict[Case, int] = {}
    for config in range(len(problem.dtype_configs())):
        for workload in problem.workloads:
            rank = 0 if workload.name in thorough else MORE_WORKLOAD_VALUES
            cases: list[Case] = []
            for seed in range(profile.seeds):
                base = Case(workload.sizes, config, (), (), seed, workload.name)
                if workload.name in sampled and seed == 0:
                    ranked.setdefault(base, 0)
                cases.append(base)
                cases += [base.with_value(u.name, "ones") for u in upstream]
                cases += [
                    base.with_value(i.name, d)
                    for i in indices
                    for d in DEEP_INDEX_DISTRIBUTIONS
                    if d in profile.index_distributions
                ]
                cases += [
                    base.with_value(s.name, str(mode)) for s in modes for mode in s.modes()[1:]
                ]
                deep = deepened(problem, workload.as_dict(), profile.gradient_depth, ctx.device)
                if deep is not None:
                    sizes, label = deep
                    cases.append(base.with_sizes(sizes, label))
                    cases += [
                        base.with_sizes(sizes, label).with_value(i.name, "zipf") for i in indices
                    ]
            for case in cases:
                ranked.setdefault(case, rank)
    names = [w.name for w in problem.workloads]
    at = problem.workloads[names.index(base_workload(ctx))]
    for u in upstream:
        if u.domain.contiguous:
            continue  # its callers always pass it contiguous
        shape = resolve_shape(u.shape, at.as_dict())
        for layout in UPSTREAM_LAYOUTS:
            if layout in problem.contract.layouts and geometry(layout, shape) is not None:
                ranked.setdefault(Case(at.sizes, 0, (), ((u.name, layout),), 0, at.name), 0)
    return list(ranked.items())


def reduced_axes(problem: Problem) -> list[str]:
    """Axes some input has and some output lacks: what a gradient sums over (the rows of a
    norm's weight gradient, the tokens of an embedding gradient)."""
    declared = {a.name for a in problem.axes}
    had = {d for i in problem.inputs if not isinstance(i, ScalarInput) for d in i.shape}
    reduced: list[str] = []
    for out in problem.outputs:
        for axis in sorted(a for a in had if a in declared and a not in out.shape):
            if axis not in reduced:
                reduced.append(axis)
    return reduced


def deepened(
    problem: Problem, sizes: dict[str, int], factor: int, device: str
) -> tuple[dict[str, int], str] | None:
    """The workload with every reduced axis made `factor` times longer
    (`Profile.gradient_depth`), as far as the axis's constraints and the element budget allow;
    None when nothing can grow."""
    budget = _DEEP_ELEMENTS["cuda" if device.startswith("cuda") else "cpu"]
    axes = {a.name: a for a in problem.axes}
    grown = dict(sizes)
    for name in reduced_axes(problem):
        axis = axes[name]
        target = _admitted(axis, sizes[name] * factor)
        while target > sizes[name] and _largest(problem, {**grown, name: target}) > budget:
            target = _admitted(axis, target // 2)
        if target > sizes[name]:
            grown[name] = target
    if grown == sizes:
        return None
    longer = ", ".join(f"{n}={grown[n]}" for n in grown if grown[n] != sizes[n])
    return grown, f"deep {longer}"


def _admitted(axis: Axis, size: int) -> int:
    size = min(size, axis.max) if axis.max is not None else size
    return max(size - size % max(axis.multiple_of, 1), axis.min)


def _largest(problem: Problem, sizes: dict[str, int]) -> int:
    shapes = [i.shape for i in problem.inputs if not isinstance(i, ScalarInput)]
    shapes += [o.shape for o in problem.outputs]
    return max(math.prod(resolve_shape(shape, sizes)) for shape in shapes)


def upstream_description(problem: Problem, case: Case) -> str:
    """How the case presents the upstream gradients, e.g. "grad_out normal, transposed"."""
    parts = []
    for inp in problem.inputs:
        if isinstance(inp, TensorInput) and inp.role == "upstream":
            values = case.value_of(inp.name, "normal")
            kind = "all ones" if values == "ones" else f"{values}, varying per element"
            if case.layout_of(inp.name) == "broadcast":
                kind = "one value broadcast to every element"
            parts.append(f"{inp.name} {kind}, {case.layout_of(inp.name)}")
    return "; ".join(parts) or "none"
