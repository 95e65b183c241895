"""Global state: precision flags, deterministic-algorithm settings, the RNG state and the
functions a harness times and compares with must be the same after the candidate's import and
after each call as before. A candidate that enables TF32 changes what a reference in the same
process computes; one that replaces `time.perf_counter` or `torch.allclose` changes what a
harness in the same process measures or concludes."""

from __future__ import annotations

from typing import ClassVar

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe
from kernelaudit.runner.boundary.messages import StateChange


class GlobalState:
    name: ClassVar[str] = "global-state"
    summary: ClassVar[str] = (
        "importing and calling the candidate leaves precision flags, deterministic settings, "
        "the RNG state and timing or comparison functions unchanged"
    )

    def plan(self, ctx: PlanContext) -> list[Probe]:
        return []  # every run is watched

    def judge(self, observation: Observation) -> list[Failure]:
        result = observation.result
        failures = [_failure("import", change, None) for change in result.import_changes]
        seen = {f.key for f in failures}
        for call, outcome in enumerate(result.calls):
            for change in outcome.state_changes:
                failure = _failure("call", change, call)
                if failure.key not in seen:
                    seen.add(failure.key)
                    failures.append(failure)
        return failures

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []


def _failure(when: str, change: StateChange, call: int | None) -> Failure:
    moment = "importing the candidate" if call is None else "a call of the candidate"
    return Failure(
        key=f"{when}:{change.name}",
        title=f"{moment} changed {change.name}: {change.before} -> {change.after}",
        evidence=(
            ("state", change.name),
            ("before", change.before),
            ("after", change.after),
            ("when", "import" if call is None else f"call {call}"),
        ),
    )
