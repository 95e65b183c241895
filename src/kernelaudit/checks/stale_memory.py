"""Stale memory: an output must not take its values from memory the candidate never wrote.

A harness that runs the reference and then the candidate in one process hands the candidate
the reference's freed output through the caching allocator: a candidate that allocates its
output and skips the work returns the right answer. Here the reference never runs in the
candidate's process, and this probe goes further: it calls the candidate twice on the same
inputs, filling every block the device allocator holds free with a poison byte before each
call. An output holding that byte pattern was never written; a second call that fails where
the first passed read what the first left behind."""

from __future__ import annotations

from typing import ClassVar

import torch

from kernelaudit.checks.base import (
    Failure,
    Observation,
    PlanContext,
    Probe,
    RunPlan,
    Step,
    restated,
)
from kernelaudit.checks.labels import output_name
from kernelaudit.checks.numerics import judge_results
from kernelaudit.checks.sweep import boundary_cases
from kernelaudit.runner.boundary.poison import SCRUB_BYTE


class StaleMemory:
    name: ClassVar[str] = "stale-memory"
    summary: ClassVar[str] = (
        "outputs do not inherit freed memory: a call after the allocator's free memory is "
        "poisoned still gives the right result"
    )

    def plan(self, ctx: PlanContext) -> list[Probe]:
        first = boundary_cases(ctx, 0)[0]
        return [Probe(self.name, first, RunPlan(steps=(Step(scrub=True), Step(scrub=True))))]

    def judge(self, observation: Observation) -> list[Failure]:
        result = observation.result
        if observation.probe.check != self.name or result.error or len(result.calls) < 2:
            return []
        for call, outcome in enumerate(result.calls):
            for k, output in enumerate(outcome.outputs):
                count = scrubbed_elements(output)
                if count:
                    name = output_name(observation.problem, k)
                    return [
                        Failure(
                            key=f"scrubbed:{name}",
                            title=f"output {name!r} holds the byte pattern freed device memory "
                            f"was filled with in {count} of {output.numel()} elements: the "
                            "candidate returned memory it never wrote",
                            evidence=(("output", name), ("call", call), ("elements", count)),
                            score=count / max(output.numel(), 1),
                        )
                    ]
        if judge_results(observation, 0):
            return []  # already wrong before any memory was poisoned: not stale memory
        lead = (
            "after the device memory the allocator held free was filled with poison, the same "
            "inputs gave a wrong result"
        )
        return [restated(failure, "stale", lead) for failure in judge_results(observation, 1)]

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []


def scrubbed_elements(tensor: torch.Tensor) -> int:
    """Elements whose every byte is the scrub byte (multi-byte dtypes only: a single 0xFF byte
    is an ordinary value of uint8 and int8)."""
    if tensor.element_size() < 2 or tensor.numel() == 0:
        return 0
    # flattened first: a 0-dim tensor cannot be viewed as bytes of another size
    raw = tensor.contiguous().reshape(-1).view(torch.uint8).reshape(-1, tensor.element_size())
    return int((raw == SCRUB_BYTE).all(dim=1).sum())
