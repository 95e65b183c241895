"""The candidate must run: a crash, hang, exception, CUDA error or a wrong number of results is
a failure with its message, and the audit carries on."""

from __future__ import annotations

from typing import ClassVar

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe

_TITLES = {
    "exception": "the candidate raised an exception",
    "crash": "the candidate's process crashed",
    "timeout": "the candidate did not return in time (hang)",
    "cuda": "the candidate triggered a CUDA error",
    "contract": "the candidate broke the calling contract",
}


class Execution:
    name: ClassVar[str] = "execution"
    summary: ClassVar[str] = (
        "the candidate runs to completion on every case and returns the declared outputs"
    )

    def plan(self, ctx: PlanContext) -> list[Probe]:
        return []

    def judge(self, observation: Observation) -> list[Failure]:
        result = observation.result
        if result.error:
            first_line = result.error.strip().splitlines()[0] if result.error.strip() else ""
            kind = result.error_kind or "exception"
            return [
                Failure(
                    key=f"{kind}:{first_line[:80]}",
                    title=f"{_TITLES.get(kind, kind)}: {first_line}",
                    evidence=(
                        ("kind", kind),
                        ("message", result.error[-4000:]),
                        ("calls completed", len(result.calls)),
                    ),
                )
            ]
        declared = len(observation.problem.outputs)
        if observation.problem.contract.style == "return":
            for index, outcome in enumerate(result.calls):
                if len(outcome.outputs) != declared:
                    return [
                        Failure(
                            key="output-count",
                            title=f"returned {len(outcome.outputs)} tensors but the problem "
                            "declares "
                            f"{declared} outputs",
                            evidence=(
                                ("call", index),
                                ("returned", len(outcome.outputs)),
                                ("declared", [o.name for o in observation.problem.outputs]),
                            ),
                        )
                    ]
        return []

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []
