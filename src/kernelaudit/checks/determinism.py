"""Determinism: identical inputs, run several times, must give identical bits. A problem that
declares itself nondeterministic has every run held to the error budget instead."""

from __future__ import annotations

from typing import ClassVar

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe, RunPlan
from kernelaudit.checks.labels import output_name
from kernelaudit.checks.numerics import judge_results
from kernelaudit.checks.sweep import boundary_cases
from kernelaudit.runner.boundary.guard import same_elements


class Determinism:
    name: ClassVar[str] = "determinism"
    summary: ClassVar[str] = "repeated runs on identical inputs agree bit for bit"

    def plan(self, ctx: PlanContext) -> list[Probe]:
        plan = RunPlan(poisons=("nan",) * max(2, ctx.profile.repeats))
        return [Probe(self.name, case, plan) for case in boundary_cases(ctx, 1)]

    def judge(self, observation: Observation) -> list[Failure]:
        result = observation.result
        if observation.probe.check != self.name or result.error or len(result.calls) < 2:
            return []
        if not observation.problem.contract.deterministic:
            failures: list[Failure] = []
            for call in range(1, len(result.calls)):
                for failure in judge_results(observation, call):
                    failures.append(
                        Failure(
                            key=f"repeat-error:{failure.key}",
                            title=f"run {call + 1} of identical inputs: {failure.title}",
                            evidence=failure.evidence,
                            score=failure.score,
                        )
                    )
            return failures[:1]
        first = result.calls[0].outputs
        for call in range(1, len(result.calls)):
            for k, (a, b) in enumerate(zip(first, result.calls[call].outputs, strict=False)):
                if a.shape != b.shape or a.dtype != b.dtype:
                    continue
                differ = ~same_elements(a, b)
                count = int(differ.sum())
                if not count:
                    continue
                name = output_name(observation.problem, k)
                gap = (a.double() - b.double()).abs()[differ]
                return [
                    Failure(
                        key=f"nondeterministic:{name}",
                        title=f"{name!r}: run {call + 1} on identical inputs differs from run 1 in "
                        f"{count} of {a.numel()} elements (largest difference "
                        f"{float(gap.nan_to_num(float('inf')).max()):.3g})",
                        evidence=(
                            ("output", name),
                            ("runs", len(result.calls)),
                            ("differing elements", count),
                            ("first index", tuple(int(i) for i in differ.nonzero()[0])),
                        ),
                        score=count / max(a.numel(), 1),
                    )
                ]
        return []

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []
