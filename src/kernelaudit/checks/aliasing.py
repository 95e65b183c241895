"""Output aliasing: an output must own its storage, and must not change when the candidate is
called again (a reused static buffer silently overwrites results the caller still holds)."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe, RunPlan
from kernelaudit.checks.labels import output_name, tensor_name
from kernelaudit.checks.sweep import boundary_cases


class Aliasing:
    name: ClassVar[str] = "aliasing"
    summary: ClassVar[str] = (
        "outputs share no storage with inputs and stay unchanged after later calls"
    )

    def plan(self, ctx: PlanContext) -> list[Probe]:
        first = boundary_cases(ctx, 0)[0]
        followup = replace(first, seed=first.seed + 1)
        return [Probe(self.name, first, RunPlan(poisons=("nan",), followup=followup))]

    def judge(self, observation: Observation) -> list[Failure]:
        result = observation.result
        if result.error:
            return []
        allowed = {
            f"input {i}"
            for i, inp in enumerate(observation.problem.inputs)
            if inp.name in observation.problem.contract.mutates
        }
        failures = []
        for call, outcome in enumerate(result.calls):
            for alias in outcome.aliases:
                if alias.split(" ~ ")[-1] in allowed:
                    continue
                failures.append(
                    Failure(
                        key=f"alias:{alias}",
                        title=" shares storage with ".join(
                            tensor_name(observation.problem, side) for side in alias.split(" ~ ")
                        ),
                        evidence=(("call", call), ("alias", alias)),
                    )
                )
                break
        if observation.probe.check == self.name:
            for call, output in result.changed_later:
                name = output_name(observation.problem, output)
                failures.append(
                    Failure(
                        key=f"changed-later:{name}",
                        title=f"output {name!r} returned by call {call} changed when the candidate "
                        "was called again: it hands out a buffer it reuses",
                        evidence=(
                            ("call", call),
                            ("output", name),
                            ("calls in sequence", len(result.calls)),
                        ),
                    )
                )
        return failures

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []
