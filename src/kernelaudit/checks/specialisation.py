"""Shape specialisation: a candidate must be as right at shapes no workload lists as at the
listed ones. Each probe calls the candidate at a held-back shape (every axis moved off its
workload size) and then at the workload itself; failing only the held-back shape means the
candidate was fitted to the benchmark's shapes. While the budget allows, one more shape lies
far past the largest workload (a batch axis four times as long), where a kernel wrong only
beyond the sizes a benchmark lists shows."""

from __future__ import annotations

from typing import ClassVar

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe, RunPlan, Step
from kernelaudit.checks.numerics import judge_results
from kernelaudit.checks.sweep import MORE_WORKLOAD_VALUES, SAMPLED_OUT, affordable
from kernelaudit.inputs.batch import batch_axes
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import case_elements
from kernelaudit.inputs.shapes import far_past_sizes, held_back_sizes

FAR = SAMPLED_OUT
"""The far-past shape's rank: the last of the optional cases, run only while the budget
allows."""

FAR_ELEMENTS = 1 << 27
"""The most elements (inputs and outputs together) the far-past case may hold: its fp64 truth
and the candidate's copies stay within a few GiB."""


class Specialisation:
    name: ClassVar[str] = "specialisation"
    summary: ClassVar[str] = "shapes held back from the workloads pass like the listed ones"

    def plan(self, ctx: PlanContext) -> list[Probe]:
        """A held-back shape near every workload: near the first, the smallest and the largest
        as probes every audit runs, near the others while the budget allows."""
        problem = ctx.problem
        workloads = {w.name: w for w in problem.workloads}
        held_back = held_back_sizes(problem)
        elements = {label: case_elements(problem, sizes) for sizes, label in held_back}
        by_size = sorted(elements, key=lambda label: elements[label])
        required = {held_back[0][1], by_size[0], by_size[-1]} if held_back else set()
        probes = []
        for sizes, label in held_back:
            if label != by_size[0] and not affordable(ctx, sizes, calls=2):
                required.discard(label)
            workload = workloads[label.removeprefix("held-back shape near ")]
            listed = Case(workload.sizes, 0, (), (), 0, workload.name)
            held = Case(tuple(sizes.items()), 0, (), (), 0, label)
            plan = RunPlan(steps=(Step(), Step(case=listed)))
            rank = 0 if label in required else MORE_WORKLOAD_VALUES
            probes.append(Probe(self.name, held, plan, rank=rank))
        far = self._far_past(ctx)
        return probes + ([far] if far is not None else [])

    def _far_past(self, ctx: PlanContext) -> Probe | None:
        """The largest workload with a batch axis (or, without one, its first axis) four times
        as long, then the workload itself: optional, and only where one call of it fits the
        budget and stays within `FAR_ELEMENTS`."""
        problem = ctx.problem
        largest = max(problem.workloads, key=lambda w: case_elements(problem, w.as_dict()))
        axes = batch_axes(problem) or tuple(axis.name for axis in problem.axes)
        far = far_past_sizes(problem, largest.as_dict(), f"far past {largest.name}", axes)
        if far is None:
            return None
        sizes, label = far
        if case_elements(problem, sizes) > FAR_ELEMENTS or not affordable(ctx, sizes, calls=2):
            return None
        listed = Case(largest.sizes, 0, (), (), 0, largest.name)
        plan = RunPlan(steps=(Step(), Step(case=listed)))
        return Probe(self.name, Case(tuple(sizes.items()), 0, (), (), 0, label), plan, rank=FAR)

    def judge(self, observation: Observation) -> list[Failure]:
        result = observation.result
        if observation.probe.check != self.name or result.error or len(result.calls) < 2:
            return []
        if judge_results(observation, 1):
            return []  # the listed shape fails too: the numerics check reports it
        held = dict(observation.probe.case.sizes)
        listed = dict(observation.probe.plan.sequence()[1].case.sizes)  # type: ignore[union-attr]
        return [
            Failure(
                key=f"held-back:{failure.key}",
                title=f"passes at the workload's shape {listed} but fails at the "
                f"{'far-past' if observation.probe.rank == FAR else 'held-back'} "
                f"shape {held}: {failure.title}",
                evidence=(("workload shape", listed), ("held-back shape", held), *failure.evidence),
                score=failure.score,
            )
            for failure in judge_results(observation, 0)
        ]

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []
