"""The one small interface every check implements: plan probes, judge what they observed.

A check never runs anything itself. It says which cases to run and how (`plan`), and it turns
what a run produced into failures (`judge`). The engine does the running, groups failures into
findings, shrinks them and reports them; adding a check is one module and one line in
`kernelaudit.checks.REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import torch

from kernelaudit.inputs.case import Case
from kernelaudit.problem.spec import Problem
from kernelaudit.profiles import Profile
from kernelaudit.runner.boundary.messages import InvocationResult
from kernelaudit.runner.candidate import CandidateRef

if TYPE_CHECKING:  # the oracle imports this module
    from kernelaudit.oracle.compare import Memo
    from kernelaudit.oracle.conditioning import Nudged
    from kernelaudit.oracle.selection import Selection

Severity = Literal["fail", "warn", "note"]


@dataclass(frozen=True)
class Step:
    """One call in a probe's sequence of calls, all made in one worker, back to back.

    case: the case whose inputs this call gets; None for the probe's own case.
    poison: what fills preallocated outputs and `torch.empty*` allocations ("nan", "sentinel").
    reuse: write this call's values into the very input (and output) buffers of an earlier
        step, the same tensor objects with their version counters untouched, instead of fresh
        ones: a candidate that caches by address, `id()` or version sees a call it has seen.
    updated: with `reuse`, write them as an in-place update does (an optimizer's step): the
        tensors' version counters move, so only a cache keyed on the address or `id()` hits.
    keep: whether the outputs come back; without, only their fingerprints do.
    scrub: fill the device memory the allocator holds free with poison before the call.
    settle_s: how long to wait after the call, and the device synchronise, before the outputs
        are fingerprinted again and copied (work left running in a thread shows as a change).
    timed: after the call, time repeated calls on the same inputs (see `kernelaudit.timing`).
    profiled: list the device kernels the call launches.
    noise: keep the device's SMs busy with kernels on a side stream during the call; its
        outputs are compared bit for bit with the probe's first call's.
    threads: after the call, this many host threads call the candidate at once on streams and
        buffers of their own; each one's outputs are compared with the probe's first call's.
    queued: the call is made while unrelated work queued ahead of it on the caller's stream
        has yet to run, the inputs' values last in that queue; its outputs are compared bit
        for bit with the probe's first call's.
    autotune: (autotuner, configuration index): the named Triton autotuner runs only that
        configuration during the call.
    memory: measure the device memory the call holds after it returns and its peak; the
        trusted side measures the reference's peak on the same case.
    """

    case: Case | None = None
    poison: str = "nan"
    reuse: int | None = None
    updated: bool = False
    keep: bool = True
    scrub: bool = False
    settle_s: float = 0.0
    timed: bool = False
    profiled: bool = False
    noise: bool = False
    threads: int = 0
    autotune: tuple[str, int] | None = None
    memory: bool = False
    queued: bool = False

    @property
    def measures_the_device(self) -> bool:
        """Whether the step times the candidate, lists its kernels or measures its memory:
        what anything else on the device (the auditor's own work beside it) would disturb."""
        return self.timed or self.profiled or self.memory

    def call_options(self) -> dict[str, Any]:
        """The fields that travel to the worker on its `Call`, by the Call's field names."""
        return {
            "reuse": self.reuse,
            "updated": self.updated,
            "keep": self.keep,
            "scrub": self.scrub,
            "settle_s": self.settle_s,
            "timed": self.timed,
            "profiled": self.profiled,
            "noise": self.noise,
            "threads": self.threads,
            "autotune": self.autotune,
            "memory": self.memory,
            "queued": self.queued,
        }

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "case": None if self.case is None else self.case.to_json(),
            "poison": self.poison,
            "reuse": self.reuse,
            "keep": self.keep,
            "scrub": self.scrub,
            "settle_s": self.settle_s,
            "timed": self.timed,
            "profiled": self.profiled,
        }
        # written only when set, so reports of plans that do not use them read as before
        if self.noise:
            data["noise"] = True
        if self.threads:
            data["threads"] = self.threads
        if self.autotune is not None:
            data["autotune"] = list(self.autotune)
        if self.memory:
            data["memory"] = True
        if self.queued:
            data["queued"] = True
        if self.updated:
            data["updated"] = True
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Step:
        case = data.get("case")
        autotune = data.get("autotune")
        return cls(
            case=None if case is None else Case.from_json(case),
            poison=str(data.get("poison", "nan")),
            reuse=data.get("reuse"),
            updated=bool(data.get("updated", False)),
            keep=bool(data.get("keep", True)),
            scrub=bool(data.get("scrub", False)),
            settle_s=float(data.get("settle_s", 0.0)),
            timed=bool(data.get("timed", False)),
            profiled=bool(data.get("profiled", False)),
            noise=bool(data.get("noise", False)),
            threads=int(data.get("threads", 0)),
            autotune=None if autotune is None else (str(autotune[0]), int(autotune[1])),
            memory=bool(data.get("memory", False)),
            queued=bool(data.get("queued", False)),
        )


@dataclass(frozen=True)
class RunPlan:
    """How a probe's case is run.

    poisons: one entry per call on identical inputs ("nan" or "sentinel").
    followup: a second case called right after, on fresh inputs (for state kept between calls).
    steps: an explicit sequence of calls; when given, `poisons` and `followup` are not used.
    """

    poisons: tuple[str, ...] = ("nan",)
    followup: Case | None = None
    steps: tuple[Step, ...] = ()

    def sequence(self) -> tuple[Step, ...]:
        """The calls this plan makes, in order."""
        if self.steps:
            return self.steps
        calls = tuple(Step(poison=poison) for poison in self.poisons)
        if self.followup is not None:
            calls += (Step(case=self.followup),)
        return calls

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "poisons": list(self.poisons),
            "followup": None if self.followup is None else self.followup.to_json(),
        }
        if self.steps:
            data["steps"] = [step.to_json() for step in self.steps]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunPlan:
        followup = data.get("followup")
        return cls(
            poisons=tuple(data.get("poisons", ("nan",))),
            followup=None if followup is None else Case.from_json(followup),
            steps=tuple(Step.from_json(step) for step in data.get("steps", ())),
        )


@dataclass(frozen=True)
class Probe:
    """One planned run: a case, how to run it, and the check that asked for it."""

    check: str
    case: Case
    plan: RunPlan = field(default_factory=RunPlan)
    rank: int = field(default=0, compare=False)
    """0: the probe runs whatever the time budget, up to `engine.budget.REQUIRED_MOST` budgets
    for all of them together; 1, 2, ...: optional, run lowest rank first while the audit's
    budget allows (`kernelaudit.engine.budget`), else reported as untried."""


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
    depths: tuple[int, ...] = ()
    """How many terms each result may sum: the product of the sizes of the axes the inputs have
    and that result does not (`oracle.truth.result_depths`; 1 where none is given). The
    oracle's noise floor grows with it."""
    undefined_where_nan: bool = False
    """Whether the case draws whole rows a reference may leave undefined (zero rows, rows of
    -inf: `inputs.distributions.UNDEFINED_WHERE_NAN`): where the truth is NaN, any result is
    accepted."""
    selections: tuple[Selection | None, ...] = ()
    """For each result, what it selects from when it is indices the reference chose by
    comparing floats (`oracle.selection`); None (or nothing) elsewhere."""
    memo: Memo = field(default_factory=dict, compare=False, repr=False)
    """What the oracle learns from the truth and baseline alone (the baseline's error), kept
    with the case so every check that judges it reuses it."""
    nudge: Callable[[], tuple[Nudged, ...] | None] | None = field(
        default=None, compare=False, repr=False
    )
    """Computes the case again with every input moved by one rounding (`oracle.conditioning`):
    the truth and the baseline there, which tell what the precision allows on this case; None
    where the reference cannot run it. Asked only when a result would fail on its error."""
    _nudged: list[tuple[Nudged, ...] | None] = field(
        default_factory=list, compare=False, repr=False
    )
    not_nudged: str = field(default="", compare=False)
    """Why the case is not nudged though its reference could be ("" where nothing kept it):
    a failure on its error says so, since the nudge might have excused it."""

    def depth(self, k: int) -> int:
        return self.depths[k] if k < len(self.depths) else 1

    def selection(self, k: int) -> Selection | None:
        return self.selections[k] if k < len(self.selections) else None

    def nudged_made(self) -> tuple[Nudged, ...]:
        """The nudged case where it was made already; nothing is computed."""
        return (self._nudged[0] or ()) if self._nudged else ()

    def nudged(self) -> tuple[Nudged, ...] | None:
        """The nudged case, one entry per compared result (computed once per case), or None
        where the case cannot be nudged."""
        if self.nudge is None:
            return None
        if not self._nudged:
            self._nudged.append(self.nudge())
        return self._nudged[0]


@dataclass(frozen=True)
class Judged:
    """One call's judgement: its case's expected results and inputs, its results, and the
    failures they gave."""

    expected: Expected
    inputs: Mapping[str, object]
    results: tuple[torch.Tensor, ...]
    failures: tuple[Failure, ...]


@dataclass(frozen=True)
class Observation:
    """What one probe produced, with everything a check needs to judge it.

    `inputs` and `expected` belong to the probe's own case; `step_inputs` and `step_expected`
    hold them for every call of the plan's sequence, in order (see `RunPlan.sequence`).
    `measurements` holds what the trusted side measured for the probe besides the truth: the
    reference's timing and kernels, the device's roofline, the problem's FLOPs and bytes.
    """

    problem: Problem
    probe: Probe
    result: InvocationResult
    inputs: Mapping[str, object]
    """The logical input values of the probe's case (dense, CPU)."""
    expected: Expected
    step_inputs: tuple[Mapping[str, object], ...] = ()
    step_expected: tuple[Expected, ...] = ()
    measurements: Mapping[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    """Where the candidate ran ("cpu", "cuda", "cuda:1")."""
    judged: list[Judged] = field(default_factory=list, init=False, compare=False, repr=False)
    """Calls whose results `numerics.judge_results` judged, so that a later call of the same
    case giving the same bytes (a repeat, a thread, a timed repetition) is not judged again."""

    def expected_at(self, call: int) -> Expected:
        return self.step_expected[call] if call < len(self.step_expected) else self.expected

    def inputs_at(self, call: int) -> Mapping[str, object]:
        return self.step_inputs[call] if call < len(self.step_inputs) else self.inputs

    def aligned(self, outputs: tuple[torch.Tensor, ...], call: int) -> tuple[torch.Tensor, ...]:
        """`outputs` of one call (its own, or those of its timed repetitions) aligned with
        `expected_at(call).names`: the outputs, then the after-call values of the inputs the
        contract lets the candidate mutate."""
        outcome = self.result.calls[call]
        inputs = self.inputs_at(call)
        tensor_names = [n for n, v in inputs.items() if isinstance(v, torch.Tensor)]
        after = dict(zip(tensor_names, outcome.inputs_after, strict=False))
        names = self.expected_at(call).names
        mutated = [n.removesuffix(" (after call)") for n in names if n.endswith(" (after call)")]
        declared = len(names) - len(mutated)
        # None: the input holds what it was given
        held = tuple(inputs[n] if after[n] is None else after[n] for n in mutated if n in after)
        return tuple(outputs[:declared]) + held  # type: ignore[return-value]


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
    shrinks: bool = True
    """Whether a smaller, simpler case would show the failure more plainly (the engine shrinks
    the worst case of a failing group). False for what is measured of the candidate as a whole
    at the workload it was measured at (its device time spent in the reference's kernels, a
    time below the hardware's floor): a smaller case only measures it less well, and the
    finding then reports figures of a case nobody runs."""


def restated(failure: Failure, prefix: str, lead: str) -> Failure:
    """`failure`, found by judging results again in a setting of a check's own, keyed
    "`prefix`:KEY" and titled "`lead`: TITLE" (its evidence and score kept)."""
    return replace(failure, key=f"{prefix}:{failure.key}", title=f"{lead}: {failure.title}")


@dataclass(frozen=True)
class PlanContext:
    problem: Problem
    profile: Profile
    device: str
    sm_count: int
    candidate: CandidateRef | None = None


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


NEEDS_CUDA = "needs a CUDA device"


class Concluding(Protocol):
    """A check that also speaks once the probes are judged (a static scan, say): its failures
    stand without a probe, and it sees what the runtime checks found."""

    def conclude(self, found: Sequence[tuple[str, Failure]]) -> list[Failure]:
        """Failures to report, given (check name, failure) of every runtime failure."""
        ...


class ConcludingOnly:
    """What a check that runs no probe and speaks only in `conclude` shares: it keeps the
    audit's context from `plan` (`self.context`), and judges nothing and asks for nothing
    while the probes run. A subclass that does more in `plan` calls this one first."""

    def __init__(self) -> None:
        self.context: PlanContext | None = None

    def plan(self, ctx: PlanContext) -> list[Probe]:
        self.context = ctx
        return []

    def judge(self, observation: Observation) -> list[Failure]:
        return []

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []


def note(key: str, title: str, evidence: tuple[tuple[str, Any], ...] = ()) -> Failure:
    """A finding of severity "note": what a check that ran its own experiment has to say when
    the experiment could not run or found nothing wrong."""
    return Failure(key=key, title=title, evidence=evidence, severity="note")
