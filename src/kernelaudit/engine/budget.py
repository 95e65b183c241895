"""Fit an audit's probes to its time budget.

Every probe of rank 0 runs: each value distribution, boundary size and layout at least once,
and every check's own probes. The optional ones (rank 1 and up: the same variants at more
workloads, more dtype configurations, more seeds, workloads left out of a sample) are added
lowest rank first while the estimated time of everything planned, with what the device's
probing costs besides (`CostModel.per_audit_s`), fits the probes' share of the budget. The
estimate comes from `kernelaudit.inputs.cost`, never from the clock, so which
cases run, and the verdict, do not depend on how busy the host is. A probe that makes the same
calls on the same case as one already counted costs nothing more: it is judged on that
probe's run (`engine.probing`, unless the run is too large to hold until then).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kernelaudit.checks import build_checks
from kernelaudit.checks.base import PlanContext, Probe, RunPlan
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import case_seconds, cost_model
from kernelaudit.problem.spec import Problem
from kernelaudit.profiles import Profile
from kernelaudit.runner.candidate import CandidateRef

PROBE_SHARE = 0.5
"""The share of the budget the probes may plan for: the rest is for shrinking (`SHRINK_SHARE`),
for the checks that run experiments of their own once the probes are judged, and for what an
audit costs outside its probing (starting Python and torch, planning, timing the reference):
a median 6.7 s of a `default` audit on an H200 (quartiles 5.4 and 8.8 s). At 0.6, the 17
audits of 37 on an H200 that filled their plan with optional probes took a median 30.5 s
(21-49 s); replayed from their reports without the probes 0.5 leaves out, a median 25.0 s,
with no finding lost (0.45 loses one: docs/benchmarks.md, nineteenth pass,
`benchmarks/share_replay.py`)."""

PROBING_SHARE_OF_AUDIT = 0.6
"""Of a whole audit's time, the share its probing phase takes, which turns a plan's estimate
into the audit's (`expected_seconds`): 62% summed over the bundled examples' `quick` audits on
a 2-core CPU (probing 450 s of 721 s, the training check most of the rest)."""

SHRINK_SHARE = 0.3
"""The share of the budget, in estimated seconds, that shrinking every finding of an audit may
spend (`engine.shrink.ShrinkAllowance`)."""


@dataclass(frozen=True)
class FittedPlan:
    probes: tuple[Probe, ...]
    """What runs, in order: every rank-0 probe as planned, then the optional ones taken."""
    untried: tuple[Probe, ...]
    """Optional probes the budget left out."""
    estimate_s: float
    """The estimated seconds of the probing: the probes that run, and what the device's
    probing costs besides (`CostModel.per_audit_s`)."""
    budget_s: float


def probe_seconds(problem: Problem, probe: Probe, device: str) -> float:
    """The estimated seconds of one probe: each call of its sequence on its own case."""
    return sum(
        case_seconds(problem, step.case or probe.case, device) for step in probe.plan.sequence()
    )


def fit(planned: list[Probe], problem: Problem, device: str, budget_s: float) -> FittedPlan:
    """The probes to run within `budget_s` (see the module's docstring)."""
    unique: dict[Probe, Probe] = {}
    for probe in planned:  # a probe planned twice keeps its lowest rank
        if probe not in unique or probe.rank < unique[probe].rank:
            unique[probe] = probe
    required = [p for p in unique.values() if p.rank == 0]
    optional = sorted((p for p in unique.values() if p.rank > 0), key=lambda p: p.rank)
    runs: set[tuple[Case, RunPlan]] = set()  # the calls counted so far, on their cases

    def seconds(probe: Probe) -> float:
        """The probe's seconds; none where a probe counted earlier makes the same calls."""
        counted = (probe.case, probe.plan) in runs
        return 0.0 if counted else probe_seconds(problem, probe, device)

    estimate = cost_model(device).per_audit_s
    for probe in required:
        estimate += seconds(probe)
        runs.add((probe.case, probe.plan))
    allowance = PROBE_SHARE * budget_s
    taken, untried = [], []
    for probe in optional:
        cost = seconds(probe)
        if estimate + cost <= allowance:
            taken.append(probe)
            runs.add((probe.case, probe.plan))
            estimate += cost
        else:
            untried.append(probe)
    return FittedPlan(tuple(required + taken), tuple(untried), estimate, budget_s)


def untried_summary(untried: tuple[Probe, ...]) -> tuple[tuple[str, int], ...]:
    """How many probes the budget left untried, by check and shape ("numerics @ workload 3")."""
    counts = Counter(f"{p.check} @ {p.case.label}" for p in untried)
    return tuple(sorted(counts.items()))


def unavailable_summary(
    unavailable: Sequence[tuple[Probe, str]],
) -> tuple[tuple[str, int], ...]:
    """How many probes could not run, by check, shape and why ("numerics @ boundary n=17:
    no inputs at these sizes")."""
    counts = Counter(f"{p.check} @ {p.case.label}: {why}" for p, why in unavailable)
    return tuple(sorted(counts.items()))


def expected_seconds(
    problem: Problem, candidate: CandidateRef, profile: Profile, device: str, sm_count: int
) -> float:
    """Roughly how long an audit of `candidate` will take here, before it starts: its fitted
    probes' estimate, plus as much again for the rest of an audit, in the proportion audits
    have shown (`PROBING_SHARE_OF_AUDIT`)."""
    ctx = PlanContext(problem, profile, device, sm_count, candidate)
    return fit_ahead(ctx).estimate_s / PROBING_SHARE_OF_AUDIT


def time_left(estimates: Sequence[float], finished: Mapping[int, float], lanes: int) -> float:
    """Seconds the audits not yet finished should take here, in `lanes` lanes: their
    `expected_seconds`, scaled by the pace this machine kept on those finished so far
    (`finished`: position -> seconds it took; actual over estimated), so that a host faster or
    slower than the cost model's shows in the estimate as soon as one audit is done."""
    planned = sum(estimates[i] for i in finished)
    pace = sum(finished.values()) / planned if planned > 0 else 1.0
    waiting = sum(e for i, e in enumerate(estimates) if i not in finished)
    return waiting * pace / max(1, lanes)


def fit_ahead(ctx: PlanContext) -> FittedPlan:
    """The probes every check but the concluding ones would plan for an audit of `ctx`, fitted
    to its budget, without starting anything (a concluding check plans no probe, and may
    start its experiment when asked to plan)."""
    probing = [check for check in build_checks() if not hasattr(check, "conclude")]
    planned = [p for check in probing for p in check.plan(ctx)]
    return fit(planned, ctx.problem, ctx.device, ctx.profile.budget_s)
