"""Out-of-bounds writes: every input, output and allocation sits between guard bands filled with
a canary; any byte outside a tensor's elements that changes is a write out of bounds."""

from __future__ import annotations

from typing import ClassVar

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe
from kernelaudit.checks.labels import tensor_name


class Bounds:
    name: ClassVar[str] = "bounds"
    summary: ClassVar[str] = "no write lands outside the tensors' elements (guard bands intact)"

    def plan(self, ctx: PlanContext) -> list[Probe]:
        return []  # every probe of every check runs with guard bands

    def judge(self, observation: Observation) -> list[Failure]:
        failures = []
        seen = set()
        for breach in observation.result.breaches:
            if breach.tensor in seen:
                continue
            seen.add(breach.tensor)
            name = tensor_name(observation.problem, breach.tensor)
            failures.append(
                Failure(
                    key=f"oob:{breach.tensor.split()[0]}",
                    title=f"wrote {breach.bytes_changed} bytes outside the elements of "
                    f"{name} (byte offsets {breach.first_offset}..{breach.last_offset} "
                    "from its first element)",
                    evidence=(
                        ("tensor", name),
                        ("call", breach.call),
                        ("bytes changed", breach.bytes_changed),
                        ("first byte offset", breach.first_offset),
                        ("last byte offset", breach.last_offset),
                    ),
                    score=float(breach.bytes_changed),
                )
            )
        return failures

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []
