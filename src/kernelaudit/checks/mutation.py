"""Input mutation: inputs must hold the same bits after the call unless the contract lets the
candidate write them (those are compared with the reference's own writes by the numerics)."""

from __future__ import annotations

from typing import ClassVar

import torch

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe
from kernelaudit.runner.boundary.guard import same_bits, same_elements


class Mutation:
    name: ClassVar[str] = "mutation"
    summary: ClassVar[str] = "inputs are left untouched unless the contract allows writing them"

    def plan(self, ctx: PlanContext) -> list[Probe]:
        return []  # every probe sends back the inputs a call changed

    def judge(self, observation: Observation) -> list[Failure]:
        if observation.result.error:
            return []
        allowed = set(observation.problem.contract.mutates)
        failures = []
        for call, outcome in enumerate(observation.result.calls):
            inputs = observation.inputs_at(call)
            names = [n for n, v in inputs.items() if isinstance(v, torch.Tensor)]
            for name, after in zip(names, outcome.inputs_after, strict=False):
                before = inputs[name]
                assert isinstance(before, torch.Tensor)
                if after is None:  # the worker saw it bit for bit as given
                    continue
                if name in allowed or after.shape != before.shape or same_bits(before, after):
                    continue
                changed = ~same_elements(before, after)
                count = int(changed.sum())
                if count and not any(f.key == f"mutated:{name}" for f in failures):
                    first = changed.nonzero()[0]
                    index = tuple(int(i) for i in first)
                    failures.append(
                        Failure(
                            key=f"mutated:{name}",
                            title=f"input {name!r} was modified: {count} of {before.numel()} "
                            "elements changed, and the contract does not allow writing it",
                            evidence=(
                                ("input", name),
                                ("call", call),
                                ("elements changed", count),
                                ("first index", index),
                                ("before", float(before[index])),
                                ("after", float(after[index])),
                            ),
                            score=count / max(before.numel(), 1),
                        )
                    )
        return failures

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []
