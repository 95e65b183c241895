"""Unwritten outputs: every output and every allocation the candidate makes is filled with NaN on
one call and with a second sentinel on another; an element that follows the poison was never
written (or was computed from memory that was never written).

Each boundary case is screened first by a plain call (NaN poison, the run the numerics sweep
makes of the same case, so usually shared with it): where no result holds the poison, no
element can have followed it, and the case is done. Where one does, the case is run again as
the three calls below, and judged on those."""

from __future__ import annotations

from typing import ClassVar

import torch

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe, RunPlan
from kernelaudit.checks.sweep import boundary_cases
from kernelaudit.oracle.mismatches import locate
from kernelaudit.runner.boundary.poison import poison_value

# NaN, sentinel, NaN: an element that follows the poison in all three calls was never written;
# one that is NaN exactly in the NaN calls was computed from poisoned memory
_PLAN = RunPlan(poisons=("nan", "sentinel", "nan"))
_SCREEN = RunPlan(poisons=("nan",))


class Unwritten:
    name: ClassVar[str] = "unwritten"
    summary: ClassVar[str] = "every output element is written, and no result depends on poison"

    def plan(self, ctx: PlanContext) -> list[Probe]:
        limit = 2 * len(ctx.problem.axes)
        return [Probe(self.name, case, _SCREEN) for case in boundary_cases(ctx, limit)]

    def judge(self, observation: Observation) -> list[Failure]:
        result = observation.result
        if observation.probe.check != self.name or result.error or len(result.calls) < 3:
            return []
        first, second, third = (call.outputs for call in result.calls[:3])
        failures = []
        count = min(len(first), len(second), len(third))
        for k, out in enumerate(observation.problem.outputs[:count]):
            a, b, c = first[k], second[k], third[k]
            if a.dtype == torch.bool or not (a.shape == b.shape == c.shape):
                continue
            unwritten = _holds(a, "nan") & _holds(b, "sentinel") & _holds(c, "nan")
            count = int(unwritten.sum())
            if count:
                failures.append(
                    Failure(
                        key=f"unwritten:{out.name}",
                        title=f"{out.name!r}: {count} of {a.numel()} elements are never written",
                        evidence=locate(unwritten),
                        score=count / max(a.numel(), 1),
                    )
                )
                continue
            # NaN in both NaN-poisoned calls but not in the sentinel call: a value computed from
            # memory nobody wrote (run-to-run noise cannot make NaN appear and disappear)
            tainted = (
                torch.isnan(a) & torch.isnan(c) & ~torch.isnan(b) & ~_holds(b, "sentinel")
                if a.dtype.is_floating_point
                else torch.zeros_like(a, dtype=torch.bool)
            )
            count = int(tainted.sum())
            if count:
                failures.append(
                    Failure(
                        key=f"poison-dependence:{out.name}",
                        title=f"{out.name!r}: {count} elements change with the poison in memory "
                        "the candidate did not write (reads of uninitialised memory)",
                        evidence=locate(tainted),
                        score=count / max(a.numel(), 1),
                    )
                )
        return failures

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        """The three calls, for a screened case where a result holds the NaN poison."""
        probe, result = observation.probe, observation.result
        if probe.check != self.name or probe.plan != _SCREEN or result.error or not result.calls:
            return []
        outputs = result.calls[0].outputs[: len(observation.problem.outputs)]
        if any(v.dtype != torch.bool and bool(_holds(v, "nan").any()) for v in outputs):
            return [Probe(self.name, probe.case, _PLAN, rank=probe.rank)]
        return []


def _holds(values: torch.Tensor, poison: str) -> torch.Tensor:
    marker = poison_value(poison, values.dtype)
    if values.dtype.is_floating_point and marker != marker:  # NaN poison
        return torch.isnan(values)
    return values == torch.tensor(marker, dtype=values.dtype)
