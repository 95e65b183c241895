"""Probing: run every planned probe against the candidate's worker, judge each observation with
every check, ask for one round of follow-ups, and let the concluding checks speak at the end.

Probes of different checks that make the same calls on the same case (the numerics sweep's
plain run of a workload and the gradients check's, say) share one run: the candidate is called
once, and the observation is judged again as each probe's own."""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kernelaudit.checks.base import Check, Failure, Observation, Probe, RunPlan
from kernelaudit.engine.executor import Executor, at_a_workload
from kernelaudit.engine.host_memory import cache_bytes, held_bytes
from kernelaudit.engine.progress import Progress, ProgressEvent
from kernelaudit.errors import CaseUnavailable
from kernelaudit.findings import CaseRecord, Finding
from kernelaudit.inputs.case import Case
from kernelaudit.oracle.plain import plain_errors
from kernelaudit.problem.spec import Problem

_HANGS_BEFORE_STOPPING = 2
"""Hung calls (or calls killed at a memory limit) after which an audit stops running further
cases."""


def tell(progress: Progress | None, event: ProgressEvent) -> None:
    if progress is not None:
        progress(event)


def phase_done(probing: Probing, phase: str, seconds: float) -> ProgressEvent:
    done = len(probing.records)
    return ProgressEvent("phase", done, done, phase, seconds)


def check_seconds(records: list[CaseRecord], probing: Probing) -> list[tuple[str, float]]:
    """Seconds per check: its probes' (as run, judging included) and its concluding
    experiment's, in the order checks first took time."""
    seconds: dict[str, float] = {}
    for record in records:
        seconds[record.check] = seconds.get(record.check, 0.0) + record.seconds
    for name, spent in probing.concluded.items():
        seconds[name] = seconds.get(name, 0.0) + spent
    return list(seconds.items())


@dataclass
class Probing:
    groups: dict[tuple[str, str], list[tuple[Probe, Failure]]]
    records: list[CaseRecord]
    seconds: dict[str, float]
    judging: float
    workload_errors: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Plain error figures at each workload, from its first numerics case with default values."""
    unavailable: list[tuple[Probe, str]] = field(default_factory=list)
    """Probes whose case the problem cannot make inputs for, and why."""
    concluded: dict[str, float] = field(default_factory=dict)
    """Seconds each concluding check's `conclude` took."""
    judged: dict[str, float] = field(default_factory=dict)
    """Seconds each check spent judging observations (its own probes' and the others')."""
    shared: int = 0
    """Probes judged on another probe's run of the same calls on the same case."""


def measures_the_device(probe: Probe) -> bool:
    """Whether a probe times the candidate, lists its kernels or measures its memory: work
    that anything else on the device (a concluding check's background run) would disturb."""
    return any(step.measures_the_device for step in probe.plan.sequence())


def quiet_last(probes: Sequence[Probe]) -> list[Probe]:
    """The probes in their order, those that measure the device moved to the end."""
    return sorted(probes, key=measures_the_device)  # stable: False (0) before True (1)


def probe_all(
    executor: Executor,
    checks: list[Check],
    planned: list[Probe],
    progress: Progress | None,
    quiet: Sequence[Callable[[], None]] = (),
) -> Probing:
    """Run every planned probe (and one round of the follow-ups checks ask for), judging each
    observation with every check. Before the first probe that measures the device, each of
    `quiet` is called: it waits for a check's background work on the device to end."""
    waiting = list(quiet)
    queue = deque(dict.fromkeys(planned))
    seen = set(queue)
    followups: set[Probe] = set()
    probing = Probing(groups={}, records=[], seconds={}, judging=0.0)
    runs = _SharedRuns(queue)
    hangs = 0
    current, current_s = "", 0.0
    while queue:
        probe = queue.popleft()
        if probe.check != current:
            if current:
                tell(progress, _check_done(probing, queue, current, current_s))
            current, current_s = probe.check, 0.0
        if waiting and measures_the_device(probe):
            for hook in waiting:
                hook()
            waiting.clear()
        tick = time.perf_counter()
        observation = runs.taken(probe)
        if observation is not None:
            probing.shared += 1
        else:
            try:
                observation = executor.observe(probe, upcoming=queue[0] if queue else None)
            except CaseUnavailable as error:
                probing.unavailable.append((probe, error.reason))
                if at_a_workload(executor.problem, probe.case):
                    _note_unjudged_workload(probing, probe, error)
                continue
            runs.made(probe, observation)
            # a hang costs a whole timeout, a memory kill as long as the candidate takes
            hangs += observation.result.error_kind in ("timeout", "memory")
        judging_began = time.perf_counter()
        _note_workload_errors(probing, executor.problem, observation)
        keys = []
        for check in checks:
            began = time.perf_counter()
            failures = check.judge(observation)
            spent = time.perf_counter() - began
            probing.judged[check.name] = probing.judged.get(check.name, 0.0) + spent
            for failure in failures:
                probing.groups.setdefault((check.name, failure.key), []).append((probe, failure))
                keys.append(failure.key)
            if probe in followups:
                continue  # one round of follow-ups: they never ask for more
            for extra in check.followups(observation, failures):
                if extra not in seen:
                    seen.add(extra)
                    followups.add(extra)
                    queue.append(extra)
                    runs.planned(extra)
        probing.judging += time.perf_counter() - judging_began
        if hangs >= _HANGS_BEFORE_STOPPING and queue:
            # every further hang costs a whole timeout: the verdict is already FAIL
            stopped = Failure(
                key="stopped",
                title=f"the audit stopped after {hangs} hangs or memory kills: {len(queue)} "
                "planned case(s) were not run",
                evidence=(("cases not run", len(queue)),),
                severity="warn",
            )
            probing.groups.setdefault(("execution", "stopped"), []).append((probe, stopped))
            queue.clear()
        spent = time.perf_counter() - tick
        current_s += spent
        probing.records.append(CaseRecord(probe.check, probe.case, tuple(keys), spent))
        done = len(probing.records)
        what = f"{probe.check}: {probe.case.label}"
        tell(progress, ProgressEvent("probe", done, done + len(queue), what))
    if current:
        tell(progress, _check_done(probing, queue, current, current_s))
    probing.seconds = dict(executor.seconds)
    return probing


def _note_unjudged_workload(probing: Probing, probe: Probe, error: CaseUnavailable) -> None:
    """A case at one of the problem's workloads that could not be judged on this device (its
    float64 run does not fit, say): a warning in the report, not only a count in `untried`,
    since the verdict then rests on the other cases alone."""
    unjudged = Failure(
        key="unjudged-workload",
        title=f"cases at the problem's workloads were not judged here: {error.reason}",
        evidence=(("case", probe.case.describe()), ("why", str(error))),
        severity="warn",
        shrinks=False,
    )
    probing.groups.setdefault((probe.check, unjudged.key), []).append((probe, unjudged))


class _SharedRuns:
    """The runs that probes still to come share: for each case and plan, how many probes are
    yet to run it, and the observation of its run while any is. What is held is bounded
    (`_SHARED_SHARE` of `cache_bytes`, all a run keeps alive counted); a run past that is not
    held, and the next probe with the same calls makes its own."""

    def __init__(self, probes: Sequence[Probe]) -> None:
        self._owners: Counter[tuple[Case, RunPlan]] = Counter((p.case, p.plan) for p in probes)
        self._held: dict[tuple[Case, RunPlan], tuple[Observation, int]] = {}

    def planned(self, probe: Probe) -> None:
        self._owners[(probe.case, probe.plan)] += 1

    def taken(self, probe: Probe) -> Observation | None:
        """The run another probe made of the same calls, as `probe`'s own observation."""
        key = (probe.case, probe.plan)
        self._owners[key] -= 1
        held = self._held.get(key)
        if held is None:
            return None
        if self._owners[key] <= 0:
            del self._held[key]
        return replace(held[0], probe=probe)

    def made(self, probe: Probe, observation: Observation) -> None:
        key = (probe.case, probe.plan)
        if self._owners[key] <= 0:
            return
        size = held_bytes(observation)
        held = sum(bytes_ for _, bytes_ in self._held.values())
        if held + size <= cache_bytes() * _SHARED_SHARE:
            self._held[key] = (observation, size)


_SHARED_SHARE = 0.5
"""Of the host memory kept cases may take (`host_memory.cache_bytes`), the share the runs held for
later probes may take besides."""


def _check_done(probing: Probing, queue: deque[Probe], check: str, seconds: float) -> ProgressEvent:
    done = len(probing.records)
    return ProgressEvent("check", done, done + len(queue), check, seconds)


def _note_workload_errors(probing: Probing, problem: Problem, observation: Observation) -> None:
    case = observation.probe.case
    plain = (
        observation.probe.check == "numerics"
        and not case.values
        and not case.layouts
        and case.dtype_config == 0
        and case.label not in probing.workload_errors
        and case.label in {w.name for w in problem.workloads}
    )
    if plain:
        errors = plain_errors(observation)
        if errors is not None:
            probing.workload_errors[case.label] = errors


def concluded(checks: list[Check], probing: Probing, progress: Progress | None) -> list[Finding]:
    """Findings of checks that speak once every probe is judged (see `Concluding`)."""
    found = [(name, failure) for (name, _), items in probing.groups.items() for _, failure in items]
    findings = []
    for check in checks:
        conclude = getattr(check, "conclude", None)
        if conclude is None:
            continue
        began = time.perf_counter()
        failures = conclude(found)
        spent = time.perf_counter() - began
        probing.concluded[check.name] = spent
        done = len(probing.records)
        tell(progress, ProgressEvent("check", done, done, check.name, spent))
        for failure in failures:
            findings.append(
                Finding(
                    id="",
                    check=check.name,
                    key=failure.key,
                    severity=failure.severity,
                    title=failure.title,
                    evidence=failure.evidence,
                    probe=None,
                    original=None,
                    occurrences=1,
                    probes=0,
                )
            )
    return findings
