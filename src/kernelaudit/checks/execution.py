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
    "memory": "the candidate ran out of memory",
    "contract": "the candidate broke the calling contract",
    "tampered": "the candidate's process tampered with how its calls are observed",
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
            line = headline(result.error)
            kind = result.error_kind or "exception"
            # the exception's type groups failures; its message may name sizes or addresses
            cause = line.split(":")[0] if kind == "exception" else ""
            return [
                Failure(
                    key=f"{kind}:{cause}",
                    title=f"{_TITLES.get(kind, kind)}: {line}",
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
                # calls whose outputs stay in the worker send their fingerprints only
                returned = max(len(outcome.outputs), len(outcome.fingerprints))
                if returned != declared:
                    return [
                        Failure(
                            key="output-count",
                            title=f"returned {returned} tensor(s) but the problem "
                            f"declares {declared} output(s)",
                            evidence=(
                                ("call", index),
                                ("returned", returned),
                                ("declared", [o.name for o in observation.problem.outputs]),
                            ),
                        )
                    ]
        return []

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []


def headline(error: str) -> str:
    """The line of an error text a person reads first: for a traceback, the exception line that
    follows the last frame list ("ValueError: bad shape"); otherwise the first line."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return "(no message)"
    headers = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
    if not headers:
        return lines[0]
    for line in lines[headers[-1] + 1 :]:
        if not line[0].isspace():
            return line
    return lines[-1]
