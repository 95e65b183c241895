"""Shrink a failing case to the simplest layout, values, dtype and sizes that still fail the same
way, Hypothesis-style: try one simplification at a time, keep it if the failure survives."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from kernelaudit.checks.base import Check, Failure, Probe
from kernelaudit.engine.executor import Executor
from kernelaudit.errors import CaseUnavailable
from kernelaudit.inputs.case import Case
from kernelaudit.problem.spec import Axis, Problem


@dataclass(frozen=True)
class Shrunk:
    probe: Probe
    failure: Failure
    steps: tuple[str, ...]
    attempts: int


def shrink(executor: Executor, check: Check, probe: Probe, failure: Failure, budget: int) -> Shrunk:
    """The simplest probe found within `budget` reruns that still fails with `failure.key`."""
    current, current_failure = probe, failure
    steps: list[str] = []
    attempts = 0
    improved = True
    while improved and attempts < budget:
        improved = False
        for label, case in simplifications(executor.problem, current.case):
            if attempts >= budget:
                break
            trial = _with_case(current, case)
            attempts += 1
            try:
                observation = executor.observe(trial)
            except CaseUnavailable:
                continue  # the problem cannot make inputs at these sizes
            found = _same_failure(check.judge(observation), failure.key)
            if found is not None:
                current, current_failure = trial, found
                steps.append(label)
                improved = True
                break
    return Shrunk(current, current_failure, tuple(steps), attempts)


def _with_case(probe: Probe, case: Case) -> Probe:
    """The probe on `case`; the other cases of its sequence follow its sizes and dtypes (a
    call that reuses another's buffers needs the same shapes)."""
    plan = probe.plan

    def follow(other: Case) -> Case:
        return replace(other, sizes=case.sizes, dtype_config=case.dtype_config)

    if plan.followup is not None:
        plan = replace(plan, followup=follow(plan.followup))
    if plan.steps:
        steps = tuple(
            step if step.case is None else replace(step, case=follow(step.case))
            for step in plan.steps
        )
        plan = replace(plan, steps=steps)
    return replace(probe, case=case, plan=plan)


def _same_failure(failures: list[Failure], key: str) -> Failure | None:
    return next((found for found in failures if found.key == key), None)


def simplifications(problem: Problem, case: Case) -> Iterator[tuple[str, Case]]:
    """Simpler variants of `case`, most valuable first."""
    if case.layouts:
        yield "all inputs contiguous", replace(case, layouts=())
    for name, _ in case.layouts:
        if len(case.layouts) > 1:
            yield f"{name} contiguous", case.with_layout(name, "contiguous")
    if case.values:
        yield "default values", replace(case, values=())
    for name, _ in case.values:
        if len(case.values) > 1:
            yield (
                f"{name} at its default",
                replace(case, values=tuple(v for v in case.values if v[0] != name)),
            )
    if case.dtype_config:
        yield "first dtype configuration", replace(case, dtype_config=0)
    sizes = case.size_map()
    for axis in problem.axes:
        size = sizes.get(axis.name)
        if size is None:
            continue
        for smaller in _smaller_sizes(axis, size):
            label = case.label if case.label.endswith(" (shrunk)") else f"{case.label} (shrunk)"
            yield f"{axis.name}={smaller}", case.with_sizes({**sizes, axis.name: smaller}, label)


def _smaller_sizes(axis: Axis, size: int) -> list[int]:
    def admitted_at_or_above(n: int) -> int:
        n = max(n, axis.min, 1)
        return -(-n // axis.multiple_of) * axis.multiple_of

    smallest = admitted_at_or_above(1)
    half = admitted_at_or_above(size // 2)
    return [s for s in dict.fromkeys((smallest, half)) if s < size and axis.admits(s)]
