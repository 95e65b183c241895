"""Shrink a failing case to the simplest layout, values, dtype and sizes that still fail the same
way, Hypothesis-style: try one simplification at a time, keep it if the failure survives.

Each finding tries at most the profile's `shrink_budget` simplifications, and every finding of
an audit draws on one allowance of estimated seconds (`ShrinkAllowance`, a share of the
audit's time budget): an attempt whose estimate no longer fits is left out and a cheaper one
tried, so shrinking the failures of a candidate at real sizes costs seconds, not minutes.
Like the plan, the allowance counts the cost model's estimates, never the clock: what is
shrunk does not depend on how busy the host is."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from kernelaudit.checks.base import Check, Failure, Probe
from kernelaudit.engine.budget import probe_seconds
from kernelaudit.engine.executor import Executor
from kernelaudit.errors import CaseUnavailable
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import cost_model
from kernelaudit.problem.spec import Axis, Problem


@dataclass
class ShrinkAllowance:
    """The estimated seconds an audit's shrinking may still spend, shared by its findings."""

    seconds: float

    def take(self, seconds: float) -> bool:
        """Spend `seconds` if they fit what is left; whether they did."""
        if seconds > self.seconds:
            return False
        self.seconds -= seconds
        return True


@dataclass(frozen=True)
class Shrunk:
    probe: Probe
    failure: Failure
    steps: tuple[str, ...]
    attempts: int
    cut: bool = False
    """Whether a simplification was left untried because its estimate no longer fit the
    allowance: a simpler case may still fail the same way."""


def shrink(
    executor: Executor,
    check: Check,
    probe: Probe,
    failure: Failure,
    budget: int,
    allowance: ShrinkAllowance | None = None,
) -> Shrunk:
    """The simplest probe found within `budget` reruns (and, given one, `allowance`'s
    estimated seconds) that still fails with `failure.key`."""
    current, current_failure = probe, failure
    steps: list[str] = []
    attempts, cut = 0, False
    improved = True
    while improved and attempts < budget:
        improved = False
        for label, case in simplifications(executor.problem, current.case):
            if attempts >= budget:
                break
            trial = _with_case(current, case)
            if allowance is not None and not allowance.take(
                rerun_seconds(executor.problem, trial, executor.device)
            ):
                cut = True  # a smaller case further on may still fit
                continue
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
    return Shrunk(current, current_failure, tuple(steps), attempts, cut)


def rerun_seconds(problem: Problem, probe: Probe, device: str) -> float:
    """The estimated seconds of running `probe` again to shrink a finding: its calls, and for
    each step that is timed the timing's own runs (`CostModel.timed_rerun_s`)."""
    timed = sum(step.timed for step in probe.plan.sequence())
    return probe_seconds(problem, probe, device) + timed * cost_model(device).timed_rerun_s


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
