"""Deferred work: an output must be complete when the call returns. Its bits are fingerprinted
right after the return and again after a device-wide synchronise (and, in this check's own
probe, a short wait): work left running on a side stream or in a thread changes them, and
such work escapes any timer that stops when the call returns. Threads the call leaves alive
are reported as a warning."""

from __future__ import annotations

from typing import ClassVar

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe, RunPlan, Step
from kernelaudit.checks.labels import output_name
from kernelaudit.checks.sweep import boundary_cases

SETTLE_S = 0.1
"""How long this check's probe waits after the call before looking at the outputs again: a
thread or stream that finishes the work later than this is also caught as a hang or an
unwritten output by other probes."""


class DeferredWork:
    name: ClassVar[str] = "deferred-work"
    summary: ClassVar[str] = (
        "outputs are complete when the call returns: no work left on side streams or threads"
    )

    def plan(self, ctx: PlanContext) -> list[Probe]:
        first = boundary_cases(ctx, 0)[0]
        steps = (Step(settle_s=SETTLE_S), Step(settle_s=SETTLE_S))
        return [Probe(self.name, first, RunPlan(steps=steps))]

    def judge(self, observation: Observation) -> list[Failure]:
        failures: list[Failure] = []
        for call, outcome in enumerate(observation.result.calls):
            for k in outcome.deferred:
                name = output_name(observation.problem, k)
                failures.append(
                    Failure(
                        key=f"changed-after-return:{name}",
                        title=f"output {name!r} was still being written after the call "
                        "returned: its bits changed between the return and a device-wide "
                        "synchronise (work left on a side stream or in a thread)",
                        evidence=(
                            ("output", name),
                            ("call", call),
                            ("streams created during the call", outcome.streams),
                            ("threads alive after the call", list(outcome.threads)),
                        ),
                    )
                )
            if outcome.threads and not any(f.key == "threads-alive" for f in failures):
                failures.append(
                    Failure(
                        key="threads-alive",
                        title=f"the call left {len(outcome.threads)} thread(s) running: "
                        f"{', '.join(outcome.threads[:4])}",
                        evidence=(("threads", list(outcome.threads)), ("call", call)),
                        severity="warn",
                    )
                )
        unique = {f.key: f for f in reversed(failures)}  # the first call of each kind
        return list(reversed(unique.values()))

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []
