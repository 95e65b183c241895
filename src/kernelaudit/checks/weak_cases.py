"""Weak cases: a case where an all-zeros, constant or input-passthrough output would pass cannot
tell a broken kernel from a right one. The report says so, and the sweep adds cases that can."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

import torch

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe
from kernelaudit.checks.sweep import activations
from kernelaudit.device_copies import DEVICE_COPIES, moved
from kernelaudit.inputs.case import Case
from kernelaudit.oracle.compare import compare, judging_device
from kernelaudit.oracle.metrics import absolute_floor
from kernelaudit.oracle.rule import budget


class WeakCases:
    name: ClassVar[str] = "weak-cases"
    summary: ClassVar[str] = "every numerics case can tell trivial outputs from right ones"

    def plan(self, ctx: PlanContext) -> list[Probe]:
        return []

    def judge(self, observation: Observation) -> list[Failure]:
        if observation.probe.check != "numerics":
            return []
        expected = observation.expected
        where = judging_device(observation.device)
        failures = []
        for k, name in enumerate(expected.names):
            truth, dtype = expected.truth[k], expected.dtypes[k]
            if not dtype.is_floating_point or truth.numel() == 0:
                continue
            cutoff = 2 * budget("normwise", dtype, depth=expected.depth(k))
            here = DEVICE_COPIES.on(truth, where)
            screen = _Screen(here, dtype)
            for label, impostor in _impostors(observation, here, dtype):
                if screen.error(impostor) > cutoff:
                    continue  # cannot pass even the normwise budget: skip the full comparison
                verdict = compare(
                    name,
                    impostor,
                    here,
                    expected.baseline[k],
                    dtype,
                    depth=expected.depth(k),
                    device=where,
                    memo=expected.memo,
                )
                if verdict.passed:
                    failures.append(
                        Failure(
                            key=f"weak:{name}",
                            title=f"cases where {label} would pass for {name!r} cannot "
                            "discriminate; "
                            + (
                                "stronger cases were added"
                                if _stronger(observation)
                                else "no stronger values exist for this problem"
                            ),
                            evidence=(
                                ("result", name),
                                ("impostor", label),
                                ("case", observation.probe.case.describe()),
                            ),
                            severity="note",
                        )
                    )
                    break
        return failures

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return [Probe("numerics", case) for case in _stronger(observation)] if failures else []


def _stronger(observation: Observation) -> list[Case]:
    """The case again with every activation at an offset mean, then at small integers: values
    that make outputs large and varied. Empty when that changes nothing."""
    case = observation.probe.case
    stronger = []
    for distribution in ("offset", "small_integers"):
        changed = case
        for inp in activations(observation.problem):
            changed = changed.with_value(inp.name, distribution)
        if changed.values != case.values:
            stronger.append(replace(changed, label=f"{case.label} (stronger values)"))
    return stronger


def _impostors(
    observation: Observation, truth: torch.Tensor, dtype: torch.dtype
) -> list[tuple[str, torch.Tensor]]:
    """Trivial outputs, made where `truth` is."""
    finite = truth[torch.isfinite(truth)]
    mean = float(finite.mean()) if finite.numel() else 0.0
    where = truth.device
    impostors = [("an all-zeros output", torch.zeros(truth.shape, dtype=dtype, device=where))]
    if truth.numel() > 1:  # one value is always "constant": that would say nothing
        # built in fp64 then rounded: a mean beyond the dtype's range becomes inf, as a
        # kernel's would
        constant = torch.full(truth.shape, mean, dtype=torch.float64, device=where).to(dtype)
        impostors.append((f"a constant output ({mean:.3g})", constant))
    for name, value in observation.inputs.items():
        if (
            isinstance(value, torch.Tensor)
            and value.shape == truth.shape
            and value.dtype.is_floating_point
        ):
            impostors.append((f"input {name!r} passed through", moved(value, where, dtype)))
    return impostors


class _Screen:
    """The oracle's normwise error of an impostor, floor included, in one vectorised pass:
    enough to rule out nearly every impostor without a full comparison."""

    def __init__(self, truth: torch.Tensor, dtype: torch.dtype):
        self.finite = torch.isfinite(truth)
        self.truth = torch.where(self.finite, truth.double(), 0.0)
        count = int(self.finite.sum())
        self.scale = max(float(self.truth.norm()), count**0.5 * absolute_floor(dtype))

    def error(self, impostor: torch.Tensor) -> float:
        gap = torch.where(self.finite, impostor.double() - self.truth, 0.0)
        gap = gap.nan_to_num(nan=float("inf"))  # NaN where the truth is finite never passes
        return float(gap.norm()) / self.scale if self.scale > 0 else float(gap.norm())
