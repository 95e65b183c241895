"""Weak cases: a case where an all-zeros, constant or input-passthrough output would pass cannot
tell a broken kernel from a right one. The report says so, and the sweep adds cases that can."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

import torch

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe
from kernelaudit.checks.sweep import activations
from kernelaudit.oracle.compare import budget, compare
from kernelaudit.oracle.metrics import absolute_floor


class WeakCases:
    name: ClassVar[str] = "weak-cases"
    summary: ClassVar[str] = "every numerics case can tell trivial outputs from right ones"

    def plan(self, ctx: PlanContext) -> list[Probe]:
        return []

    def judge(self, observation: Observation) -> list[Failure]:
        if observation.probe.check != "numerics":
            return []
        expected = observation.expected
        failures = []
        for k, name in enumerate(expected.names):
            truth, dtype = expected.truth[k], expected.dtypes[k]
            if not dtype.is_floating_point or truth.numel() == 0:
                continue
            cutoff = 2 * budget("normwise", dtype, depth=expected.depth)
            for label, impostor in _impostors(observation, truth, dtype):
                if _relative_error(impostor, truth, dtype) > cutoff:
                    continue  # cannot pass even the normwise budget: skip the full comparison
                verdict = compare(
                    name, impostor, truth, expected.baseline[k], dtype, depth=expected.depth
                )
                if verdict.passed:
                    failures.append(
                        Failure(
                            key=f"weak:{name}",
                            title=f"cases where {label} would pass for {name!r} cannot "
                            "discriminate; "
                            "stronger cases were added",
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
        if not failures:
            return []
        case = observation.probe.case
        stronger = []
        for distribution in ("offset", "small_integers"):
            values = dict(case.values)
            for inp in activations(observation.problem):
                values[inp.name] = distribution
            stronger.append(
                replace(
                    case,
                    values=tuple(sorted(values.items())),
                    label=f"{case.label} (stronger values)",
                )
            )
        return [Probe("numerics", c) for c in stronger if c != case]


def _impostors(
    observation: Observation, truth: torch.Tensor, dtype: torch.dtype
) -> list[tuple[str, torch.Tensor]]:
    finite = truth[torch.isfinite(truth)]
    mean = float(finite.mean()) if finite.numel() else 0.0
    impostors = [
        ("an all-zeros output", torch.zeros(truth.shape, dtype=dtype)),
        # built in fp64 then rounded: a mean beyond the dtype's range becomes inf, as a
        # kernel's would
        (
            f"a constant output ({mean:.3g})",
            torch.full(truth.shape, mean, dtype=torch.float64).to(dtype),
        ),
    ]
    for name, value in observation.inputs.items():
        if (
            isinstance(value, torch.Tensor)
            and value.shape == truth.shape
            and value.dtype.is_floating_point
        ):
            impostors.append((f"input {name!r} passed through", value.to(dtype)))
    return impostors


def _relative_error(values: torch.Tensor, truth: torch.Tensor, dtype: torch.dtype) -> float:
    """The oracle's normwise error, floor included, without the rest of a comparison."""
    finite = torch.isfinite(truth) & torch.isfinite(values)
    if not bool(finite.any()):
        return 0.0
    t = truth[finite].double()
    scale = max(float(t.norm()), t.numel() ** 0.5 * absolute_floor(dtype))
    return float((values[finite].double() - t).norm()) / scale
