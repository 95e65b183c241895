"""The one small interface every check implements: plan probes, judge what they observed.

A check never runs anything itself. It says which cases to run and how (`plan`), and it turns
what a run produced into failures (`judge`). The engine does the running, groups failures into
findings, shrinks them and reports them; adding a check is one module and one line in
`kernelaudit.checks.REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import torch

from kernelaudit.inputs.case import Case
from kernelaudit.problem.spec import Problem
from kernelaudit.profiles import Profile
from kernelaudit.runner.messages import InvocationResult

Severity = Literal["fail", "warn", "note"]


@dataclass(frozen=True)
class RunPlan:
    """How a probe's case is run.

    poisons: one entry per call on identical inputs ("nan" or "sentinel").
    followup: a second case called right after, on fresh inputs (for state kept between calls).
    """

    poisons: tuple[str, ...] = ("nan",)
    followup: Case | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "poisons": list(self.poisons),
            "followup": None if self.followup is None else self.followup.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunPlan:
        followup = data.get("followup")
        return cls(
            poisons=tuple(data.get("poisons", ("nan",))),
            followup=None if followup is None else Case.from_json(followup),
        )


@dataclass(frozen=True)
class Probe:
    """One planned run: a case, how to run it, and the check that asked for it."""

    check: str
    case: Case
    plan: RunPlan = field(default_factory=RunPlan)


@dataclass(frozen=True)
class Expected:
    """The trusted side of one case: fp64 truth and the native-precision baseline.

    Both hold one tensor per compared result: the declared outputs in order, then the values
    after the call of every input the contract lets the candidate mutate.
    """

    names: tuple[str, ...]
    truth: tuple[torch.Tensor, ...]
    baseline: tuple[torch.Tensor, ...]
    dtypes: tuple[torch.dtype, ...]
    """The dtype each result must have."""
    depth: int = 1
    """How many terms each result may sum: the product of the sizes of the axes the inputs have
    and the outputs do not (the reduced axes). The oracle's noise floor grows with it."""


@dataclass(frozen=True)
class Observation:
    """What one probe produced, with everything a check needs to judge it."""

    problem: Problem
    probe: Probe
    result: InvocationResult
    inputs: Mapping[str, object]
    """The logical input values of the probe's case (dense, CPU)."""
    expected: Expected
    followup_expected: Expected | None = None

    def results(self, call: int = 0) -> tuple[torch.Tensor, ...]:
        """What the candidate produced in one call, aligned with `expected.names`: the
        outputs, then the after-call values of the inputs the contract lets it mutate."""
        outcome = self.result.calls[call]
        tensor_names = [n for n, v in self.inputs.items() if isinstance(v, torch.Tensor)]
        after = dict(zip(tensor_names, outcome.inputs_after, strict=False))
        mutated = [
            n.removesuffix(" (after call)")
            for n in self.expected.names
            if n.endswith(" (after call)")
        ]
        declared = len(self.expected.names) - len(mutated)
        return tuple(outcome.outputs[:declared]) + tuple(after[n] for n in mutated if n in after)


@dataclass(frozen=True)
class Failure:
    """One way a probe failed a check.

    key: groups the same failure across cases into one finding ("nan-where-finite:y").
    score: larger is worse; the worst case of a group is the one shrunk and reported.
    """

    key: str
    title: str
    evidence: tuple[tuple[str, Any], ...] = ()
    severity: Severity = "fail"
    score: float = 1.0


@dataclass(frozen=True)
class PlanContext:
    problem: Problem
    profile: Profile
    device: str
    sm_count: int


class Check(Protocol):
    """A family of checks. `name` is what findings and the command line call it."""

    name: ClassVar[str]
    summary: ClassVar[str]

    def plan(self, ctx: PlanContext) -> list[Probe]:
        """The probes this check wants run."""
        ...

    def judge(self, observation: Observation) -> list[Failure]:
        """Failures seen in one observation. Called for every observation, including other
        checks' probes: a check that only judges its own runs filters on `probe.check`."""
        ...

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        """More probes worth running after seeing this observation (usually none)."""
        ...
