"""Autotune-config invariance: every configuration a Triton autotuner offers is run and judged,
not only the one it picks.

An autotuner keeps the configuration that was fastest when it first met a key; the others
never run there again. Which one wins depends on the GPU, the shape, the Triton version and
noise in the timing, so a configuration that is wrong (a block smaller than a size the kernel
assumes, a split that drops the tail) hides until another machine picks it. One probe finds the
autotuners reachable from the candidate; then every configuration of each is forced in turn on
the first workload and the boundary shapes and judged like the numerics sweep. A configuration
the autotuner would not offer for an input (its `early_config_prune` drops it, or the device
cannot compile it) is skipped, as the autotuner skips it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe, RunPlan, Step
from kernelaudit.checks.execution import headline
from kernelaudit.checks.numerics import judge_results
from kernelaudit.checks.sweep import boundary_cases
from kernelaudit.inputs.case import Case


class Autotune:
    name: ClassVar[str] = "autotune"
    summary: ClassVar[str] = (
        "every configuration each Triton autotuner offers gives correct results, not only "
        "the one it picks"
    )

    def __init__(self) -> None:
        self._cases: list[Case] = []
        self._tuned = False

    def not_applicable(self, ctx: PlanContext) -> str:
        if self._tuned:
            return ""
        return "the candidate reaches no autotuner with several configurations"

    def plan(self, ctx: PlanContext) -> list[Probe]:
        self._cases = boundary_cases(ctx, 2 * len(ctx.problem.axes))
        # the smallest case finds them: the workload first, then a boundary shape
        finding = self._cases[1] if len(self._cases) > 1 else self._cases[0]
        return [Probe(self.name, finding)]

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        if observation.probe.check != self.name or _forced(observation) is not None:
            return []
        self._tuned |= any(len(configs) > 1 for _, configs in observation.result.autotuners)
        return [
            Probe(self.name, case, RunPlan(steps=(Step(autotune=(name, index)),)))
            for name, configs in observation.result.autotuners
            if len(configs) > 1  # a single configuration is the one every call runs
            for index in range(len(configs))
            for case in self._cases
        ]

    def judge(self, observation: Observation) -> list[Failure]:
        forced = _forced(observation)
        result = observation.result
        if observation.probe.check != self.name or forced is None or result.not_run:
            return []
        name, index = forced
        config = _described(observation, name, index)
        which = f"autotuner {name} configuration {index} ({config})"
        head: tuple[tuple[str, Any], ...] = (
            ("autotuner", name),
            ("configuration", index),
            ("config", config),
        )
        key = f"config:{name}#{index}"
        if result.error:
            return [
                Failure(
                    key=key,
                    title=f"{which} fails to run: {headline(result.error)}",
                    evidence=(
                        *head,
                        ("kind", result.error_kind),
                        ("message", result.error[-4000:]),
                    ),
                )
            ]
        if not result.calls or not result.calls[0].forced_runs:
            return []  # the candidate did not launch this autotuner for this input
        failures = judge_results(observation, 0)
        if not failures:
            return []
        worst = max(failures, key=lambda failure: failure.score)
        return [
            Failure(
                key=key,
                title=f"{which}: {worst.title}",
                evidence=(*head, *worst.evidence),
                score=worst.score,
            )
        ]


def _forced(observation: Observation) -> tuple[str, int] | None:
    steps = observation.probe.plan.sequence()
    return steps[0].autotune if steps else None


def _described(observation: Observation, name: str, index: int) -> str:
    for tuner, configs in observation.result.autotuners:
        if tuner == name and index < len(configs):
            return configs[index]
    return "?"
