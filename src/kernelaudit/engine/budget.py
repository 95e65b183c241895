"""Fit an audit's probes to its time budget.

Every probe of rank 0 runs: each value distribution, boundary size and layout at least once,
and every check's own probes, unless together they are estimated past `REQUIRED_MOST` times
the budget (a problem whose every call moves gigabytes); then each check's first probe runs,
the others are taken a round at a time across the checks while they fit, and the rest are
reported as untried, their checks as run in part (`FittedPlan.cut`). The optional ones (rank 1
and up: the same variants at more workloads, more dtype configurations, more seeds, workloads
left out of a sample) are added lowest rank first while the estimated time of everything
planned, with what the device's probing costs besides (`CostModel.per_audit_s`), fits the
probes' share of the budget. The estimate comes from `kernelaudit.inputs.cost`, never from
the clock, so which cases run, and the verdict, do not depend on how busy the host is. A probe
that makes the same calls on the same case as one already counted costs nothing more: it is
judged on that probe's run (`engine.probing`, unless the run is too large to hold until then).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kernelaudit.checks import build_checks
from kernelaudit.checks.base import PlanContext, Probe, RunPlan
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import case_seconds, cost_model
from kernelaudit.problem.spec import Problem
from kernelaudit.profiles import Profile
from kernelaudit.runner.candidate import CandidateRef
from kernelaudit.training.estimate import training_seconds

PROBE_SHARE = 0.5
"""The share of the budget the probes may plan for: the rest is for shrinking (`SHRINK_SHARE`),
for the checks that run experiments of their own once the probes are judged, and for what an
audit costs outside its probing (starting Python and torch, planning, timing the reference):
a median 6.7 s of a `default` audit on an H200 (quartiles 5.4 and 8.8 s). At 0.6, the 17
audits of 37 on an H200 that filled their plan with optional probes took a median 30.5 s
(21-49 s); replayed from their reports without the probes 0.5 leaves out, a median 25.0 s,
with no finding lost (0.45 loses one: docs/benchmarks.md, nineteenth pass,
`benchmarks/share_replay.py`)."""

AUDIT_PER_PROBE_SECOND = {"cpu": 1.0, "cuda": 1.4}
"""The seconds a whole audit takes outside the training check (`training.estimate`) per
second of its probes' estimate, by device kind: what turns a plan's estimate into the audit's
(`expected_seconds`). On a GPU 1.4: the bundled examples' `quick` audits on an H200 took 1.68
times their probes' estimate outside training, and about 1.41 times without the 27 s that
shrinking the timing check's echoes of a failure took among them (no longer shrunk,
`engine.grouping.findings_of`). On a CPU 1.0: a 2-core host took 0.63 times the estimate, and
ran the whole demo 1.6 times faster than the cost model's estimate of it (251 s against 403
s), so 1.0 at the pace of the hosts that model was fitted on, which is the pace a first
announcement states (docs/benchmarks.md, "The demo's estimate counts the training")."""

REQUIRED_MOST = 10.0
"""The probes every audit runs may be estimated at up to this many times the budget (300 s of
`default`'s 30 s; an autograd-enabled candidate's backward, planned as a problem of its own,
has as much again). On the 211 runnable SOL-ExecBench problems the cost model puts the median
audit's required probes at 21 s and 46 of them past 120 s, up to 11,887 s: problems whose cases
hold a key-value cache, a video or an expert's weights of gigabytes, whose audits took 75 s to
past 180 s on an H200 where the median took 29 s. The bundled examples' required probes come
to at most 6.5 budgets (the backward of RMSNorm, `quick`, on a CPU), so none of them is cut
(docs/benchmarks.md, "The required probes held to ten budgets")."""

SHRINK_SHARE = 0.3
"""The share of the budget, in estimated seconds, that shrinking every finding of an audit may
spend (`engine.shrink.ShrinkAllowance`)."""


@dataclass(frozen=True)
class FittedPlan:
    probes: tuple[Probe, ...]
    """What runs, in order: the rank-0 probes as planned (those `cut` aside), then the optional
    ones taken."""
    untried: tuple[Probe, ...]
    """Probes the budget left out: optional ones, and any in `cut`."""
    estimate_s: float
    """The estimated seconds of the probing: the probes that run, and what the device's
    probing costs besides (`CostModel.per_audit_s`)."""
    budget_s: float
    cut: tuple[Probe, ...] = ()
    """Probes every audit runs that were left out, being estimated past `REQUIRED_MOST`
    budgets (also in `untried`)."""


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
    required, cut = _within(required, REQUIRED_MOST * budget_s - estimate, seconds)
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
    return FittedPlan(tuple(required + taken), tuple(cut + untried), estimate, budget_s, tuple(cut))


def _within(
    required: list[Probe], room_s: float, seconds: Callable[[Probe], float]
) -> tuple[list[Probe], list[Probe]]:
    """The probes every audit runs that it does run, in their planned order, and those left
    out: all of them where their estimate fits `room_s`; otherwise each check's first, then a
    round at a time across the checks (every check's second, then its third...), each taken
    where it still fits, so that no check's probes crowd out the others' and a costly probe
    gives way to cheaper ones after it. A probe making the same calls on the same case as one
    taken costs nothing more, and is taken."""
    costs: dict[tuple[Case, RunPlan], float] = {}
    for probe in required:
        costs.setdefault((probe.case, probe.plan), seconds(probe))
    if not required or sum(costs.values()) <= room_s:
        return required, []
    by_check: dict[str, list[Probe]] = {}
    for probe in required:
        by_check.setdefault(probe.check, []).append(probe)
    taken: set[Probe] = set()
    counted: set[tuple[Case, RunPlan]] = set()
    spent = 0.0
    for turn in range(max(len(probes) for probes in by_check.values())):
        for probes in by_check.values():
            if turn >= len(probes):
                continue
            probe = probes[turn]
            run = (probe.case, probe.plan)
            cost = 0.0 if run in counted else costs[run]
            if turn == 0 or run in counted or spent + cost <= room_s:
                taken.add(probe)
                counted.add(run)
                spent += cost
    return [p for p in required if p in taken], [p for p in required if p not in taken]


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
    problem: Problem,
    candidate: CandidateRef,
    profile: Profile,
    device: str,
    sm_count: int,
    *,
    trains: bool = True,
    reference_runs: bool = True,
) -> float:
    """Roughly how long an audit of `candidate` will take here, before it starts: its fitted
    probes' estimate, with the rest of an audit in the proportion audits have shown
    (`AUDIT_PER_PROBE_SECOND`), plus the training check's steps where it `trains`, the
    reference's runs among them where this audit makes them (`training.estimate`)."""
    ctx = PlanContext(problem, profile, device, sm_count, candidate)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    seconds = fit_ahead(ctx).estimate_s * AUDIT_PER_PROBE_SECOND[kind]
    if trains:
        seconds += training_seconds(problem, profile, device, reference_runs=reference_runs)
    return seconds


def expected_all(
    jobs: Sequence[tuple[Problem, CandidateRef]],
    profile: Profile,
    device: str,
    sm_count: int,
    *,
    trains: bool = True,
) -> list[float]:
    """`expected_seconds` of each of `jobs`, audited in one process in this order (or by
    problem in lanes, which deal a problem's candidates to one lane, `engine.lanes`): the
    first candidate of a problem makes the reference's training runs, the later ones take
    them from it. `trains`: whether the training check is among the checks run."""
    seen: set[tuple[str, str]] = set()
    estimates: list[float] = []
    for problem, candidate in jobs:
        key = (problem.source or problem.name, problem.slot)
        made = key not in seen
        estimates.append(
            expected_seconds(
                problem, candidate, profile, device, sm_count, trains=trains, reference_runs=made
            )
        )
        seen.add(key)
    return estimates


def time_left(
    estimates: Sequence[float],
    finished: Mapping[int, float],
    lanes: int,
    elapsed_s: float = 0.0,
    pace: float | None = None,
    dealt: Sequence[Sequence[int]] = (),
    ended_s: Sequence[float] = (),
) -> float:
    """Seconds until the audits not yet finished should be done, in `lanes` lanes that take
    the problems `dealt` (the jobs' positions by problem, in the order they are handed out, as
    `engine.lanes.deal` gives them; each job its own problem, in order, when not given) each
    as a lane comes free. `finished`: position -> seconds its audit took; `ended_s`: when each
    problem finished, in seconds since the lanes started (`elapsed_s` now), which is when the
    next problem in line started.

    Each problem left takes its jobs' `expected_seconds` at this machine's pace, less what its
    lane has already spent on it: actual over estimated seconds, `pace` (the one this machine
    kept on its last runs, `engine.pace`) weighed as one lane's share of the estimates together
    with the audits finished so far; without a kept pace, the finished audits' alone (1.0
    before any). One problem's audits can run well off the model's estimate, and the longest
    go first, so the first to finish alone would say little of the rest."""
    lanes = max(1, lanes)
    planned = sum(estimates[i] for i in finished)
    taken = sum(finished.values())
    prior = sum(estimates) / lanes if pace is not None else 0.0
    weighed = planned + prior
    rate = (taken + (pace or 0.0) * prior) / weighed if weighed > 0 else 1.0
    problems = [list(p) for p in dealt] or [[i] for i in range(len(estimates))]
    starts = [0.0] * lanes + sorted(ended_s)
    free: list[float] = []  # when each lane is free of what it has now
    for k, positions in enumerate(problems):
        if all(p in finished for p in positions):
            continue
        work = rate * sum(estimates[p] for p in positions)
        if k < len(starts):  # started, as its lane came free
            free.append(elapsed_s + max(0.0, work - (elapsed_s - starts[k])))
            continue
        free += [elapsed_s] * (lanes - len(free))  # lanes with nothing left to finish
        earliest = min(range(len(free)), key=free.__getitem__)
        free[earliest] += work
    return max(free, default=elapsed_s) - elapsed_s


def fit_ahead(ctx: PlanContext) -> FittedPlan:
    """The probes every check but the concluding ones would plan for an audit of `ctx`, fitted
    to its budget, without starting anything (a concluding check plans no probe, and may
    start its experiment when asked to plan)."""
    probing = [check for check in build_checks() if not hasattr(check, "conclude")]
    planned = [p for check in probing for p in check.plan(ctx)]
    return fit(planned, ctx.problem, ctx.device, ctx.profile.budget_s)
