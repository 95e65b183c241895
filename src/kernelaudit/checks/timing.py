"""Timing: candidate and reference times measured honestly (see `kernelaudit.timing`), and the
outputs of every timed call validated: a candidate that behaves differently while it is timed
(it inspects its caller, counts calls, or skips work when called back to back) fails, and so
does a time below the physical floor of the device's measured roofline, and a time the
auditor's own clock contradicts (`engine.clocked`: the worker's figures are made in the
candidate's process).

The probe runs one call that is judged like any other, then the timed repetitions on the same
inputs. Each repetition's outputs are fingerprinted; on a deterministic problem they must have
the judged call's bits, and the last repetition's outputs are judged against the truth."""

from __future__ import annotations

from typing import Any, ClassVar

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
from kernelaudit.engine.clocked import beats_floor, disagrees
from kernelaudit.inputs.case import Case
from kernelaudit.runner.boundary.messages import changed
from kernelaudit.timing import measure
from kernelaudit.timing.kernels import agreement, is_mismatch
from kernelaudit.timing.measure import format_seconds
from kernelaudit.timing.roofline import measured_position


def timing_probe(ctx: PlanContext) -> Probe:
    """The one timed (and profiled) run of an audit, at the first workload listed (the size
    the problem's speed is quoted at, whichever workload the other checks depart from)."""
    first = ctx.problem.workloads[0]
    case = Case(first.sizes, 0, (), (), 0, first.name)
    return Probe("timing", case, RunPlan(steps=(Step(timed=True, profiled=True),)))


class Timing:
    name: ClassVar[str] = "timing"
    summary: ClassVar[str] = (
        "candidate and reference timed honestly; timed calls give the judged call's results "
        "and no time beats the device's physical floor"
    )

    def __init__(self) -> None:
        self._unsettled = ""

    def plan(self, ctx: PlanContext) -> list[Probe]:
        self._unsettled = ""
        return [timing_probe(ctx)]

    def ran_in_part(self, ctx: PlanContext) -> str:
        return self._unsettled

    def judge(self, observation: Observation) -> list[Failure]:
        result = observation.result
        if observation.probe.check != self.name or result.error or not result.calls:
            return []
        outcome = result.calls[0]
        if outcome.timing is None:
            return []
        failures = _timed_outputs(observation)
        place = measured_position(observation.measurements, worker_timing(observation).median_s)
        # a busy host only slows a call: any of the worker's figures below the floor is one
        # no honest timing gives
        fastest = worker_timing(observation, slowest=False)
        below = measured_position(observation.measurements, fastest.median_s)
        if below is not None and (below.beats_floor or below.below_unsteady):
            # a GPU's roofline is its fastest sample of a device the audit has to itself, and
            # fails a kernel where it was measured steadily; a CPU's is measured on cores other
            # processes share, so under load it can sit above what the same kernel reaches a
            # moment later: not a floor to fail on
            on_cpu = torch.device(observation.device).type == "cpu"
            why = ""
            if on_cpu:
                why = " (on a CPU the measured roofline depends on what else the host runs"
            elif below.below_unsteady:
                why = " (the roofline was measured while the device was unsteady"
            failures.append(
                Failure(
                    key="beats-floor",
                    title=f"timed at {format_seconds(fastest.median_s)} per call, "
                    f"below the physical floor of {format_seconds(below.floor_s)}: "
                    f"{below.text}" + (f"{why}, so this is a note, not a failure)" if why else ""),
                    evidence=_times(observation, below),
                    severity="note" if why else "fail",
                    shrinks=False,  # the floor of the timed workload
                )
            )
        clocked = _clock_failures(observation, place)
        if any(f.key == "clock-unresolved" for f in clocked):
            self._unsettled = (
                "the auditor's clock could not tell whether calls made again skip work: the "
                "host was too busy"
            )
        failures += clocked
        profile = outcome.kernels
        if profile is not None and profile.calls:
            gap, text = agreement(outcome.timing, profile)
            if is_mismatch(gap, profile):
                failures.append(
                    Failure(
                        key="event-vs-kernel",
                        title=f"event timing and the profiler's kernel time disagree: {text}",
                        evidence=_times(observation, place),
                        severity="warn",
                    )
                )
        failures.append(
            Failure(
                key="times",
                title=_headline(observation, place),
                evidence=_times(observation, place),
                severity="note",
            )
        )
        return failures

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []


def worker_timing(observation: Observation, slowest: bool = True) -> measure.Timing:
    """The worker's figure for the candidate: the timing probe's, or the slowest of the times
    the call was timed again next to the auditor's clock (`engine.clocked`), so that a worker
    reporting fast only the first time gains nothing (with `slowest` false: the fastest)."""
    first = observation.result.calls[0].timing
    assert first is not None, "judged only where the timed call has a timing"
    clocked = observation.measurements.get("auditor clock")
    figures = (first, *(clocked.retimed if clocked is not None else ()))
    pick = max if slowest else min
    return pick(figures, key=lambda timing: timing.median_s)


def _timed_outputs(observation: Observation) -> list[Failure]:
    outcome = observation.result.calls[0]
    failures: list[Failure] = []
    if observation.problem.contract.deterministic:
        for repetition, seen in enumerate(outcome.timed_fingerprints):
            differ = changed(outcome.fingerprints, seen)
            if differ:
                name = output_name(observation.problem, differ[0])
                failures.append(
                    Failure(
                        key=f"timed-differs:{name}",
                        title=f"output {name!r} of timed repetition {repetition + 1} differs "
                        "from the judged call's on the same inputs: the candidate behaves "
                        "differently while it is timed",
                        evidence=(
                            ("output", name),
                            ("repetition", repetition + 1),
                            ("repetitions", len(outcome.timed_fingerprints)),
                        ),
                    )
                )
                break
    if outcome.timed_outputs:
        lead = "the last timed repetition's results are wrong"
        for failure in judge_results(observation, 0, outputs=outcome.timed_outputs):
            failures.append(restated(failure, "timed-output", lead))
    return failures


def _clock_failures(observation: Observation, place: Any) -> list[Failure]:
    """What the auditor's own clock (`engine.clocked`) says of the worker's figure: calls it
    finds far slower than reported, repetitions that did not leave the call's results, and
    (on a GPU) calls back to back faster than the device's physical floor."""
    clocked = observation.measurements.get("auditor clock")
    if clocked is None:
        return []
    evidence = _times(observation, place)
    if clocked.error:
        # the call ran in the timed run: one that fails when made again (or hangs there) is
        # failing for its candidate, only a lack of room is the audit's
        failing = clocked.kind not in ("", "memory")
        key, said = ("not-clocked", "could not be timed")
        if failing:
            key, said = ("clock-failed", "failed")
        if clocked.kind == "tampered":
            key, said = ("clock-tampered", "were tampered with")
        return [
            Failure(
                key=key,
                title=f"the calls timed on the auditor's clock {said}: {clocked.error}",
                evidence=evidence,
                severity="fail" if failing else "note",
                shrinks=False,
            )
        ]
    lead = (
        "the call the auditor's clock timed gave wrong results (so did the calls repeated "
        "after it, which must equal them)"
    )
    failures = [
        restated(failure, "clock-output", lead)
        for failure in judge_results(observation, 0, outputs=clocked.outputs)
    ]
    contract = observation.problem.contract
    if clocked.unlike and contract.deterministic and not contract.mutates:
        failures.append(
            Failure(
                key="clock-repeats-differ",
                title=f"{len(clocked.unlike)} of the {clocked.repeats} calls made back to back "
                "for the auditor's clock did not leave the call's results (first: repetition "
                f"{clocked.unlike[0] + 1}): they were not made as timed, or the candidate gives "
                "other results when it is called again",
                evidence=evidence,
                shrinks=False,
            )
        )
    figures = clocked.reported_s or (0.0,)  # the worker's, one per pair measured
    first, again = figures[0], max(figures)
    if disagrees(first, again, observation.device):
        failures.append(
            Failure(
                key="clock-timed-again-slower",
                title=f"timed again next to the auditor's clock, the call took "
                f"{format_seconds(again)} per call in the candidate's process, "
                f"{again / max(first, 1e-12):,.0f}x the {format_seconds(first)} of the timing "
                "probe: the host got busy in between, or the candidate times itself fast "
                "only the first time (the slower figure is the one reported)",
                evidence=evidence,
                severity="warn",
                shrinks=False,
            )
        )
    if clocked.disagrees(observation.device):
        reported = ", ".join(format_seconds(s) for s in dict.fromkeys(clocked.reported_s))
        each = " (timed again next to each measurement)" if clocked.retimed else ""
        failures.append(
            Failure(
                key="clock-disagrees",
                title=f"timed at {reported} per call in the candidate's process{each}, but "
                f"the auditor's own clock took at least {format_seconds(clocked.per_call_s)} "
                f"per call over {clocked.repeats} calls back to back: the candidate's process "
                "did not time its calls honestly",
                evidence=evidence,
                shrinks=False,
            )
        )
    below = beats_floor(observation.measurements, clocked.most_s, observation.device)
    settled = clocked.settled_most_s
    if below is not None and beats_floor(observation.measurements, settled, observation.device):
        failures.append(
            Failure(
                key="clock-beats-floor",
                title=f"{clocked.repeats} calls back to back on the same inputs took at most "
                f"{format_seconds(clocked.most_s)} each on the auditor's clock (every one of "
                f"{len(clocked.samples_s)} measurements), below the physical floor of "
                f"{format_seconds(below.floor_s)}: the candidate skips work when it is "
                "called again",
                evidence=evidence,
                shrinks=False,
            )
        )
    elif below is not None:
        failures.append(
            Failure(
                key="clock-unresolved",
                title=f"{clocked.repeats} calls back to back took at most "
                f"{format_seconds(clocked.most_s)} each on the auditor's clock, below the "
                f"physical floor of {format_seconds(below.floor_s)}, but its invocations' "
                f"round trips varied by {format_seconds(clocked.spread_s)} a call"
                + (
                    ", and one with the calls came back no later than one without"
                    if clocked.contradicted
                    else ""
                )
                + ": the host was too busy for the clock to tell whether calls made again "
                "skip work (not verified; audit again on a quieter host)",
                evidence=evidence,
                severity="warn",
                shrinks=False,
            )
        )
    return failures


def _headline(observation: Observation, place: Any) -> str:
    found = observation.measurements
    timed = worker_timing(observation)
    parts = [f"candidate {format_seconds(timed.median_s)} per call"]
    first = observation.result.calls[0].timing
    if first is not None and timed is not first:
        parts[0] += (
            f" (timed again next to the auditor's clock, the slowest kept; first "
            f"{format_seconds(first.median_s)})"
        )
    reference = found.get("reference timing")
    if reference is not None and reference.median_s > 0:
        parts.append(f"reference {format_seconds(reference.median_s)}")
        parts.append(f"{reference.median_s / max(timed.median_s, 1e-12):.2f}x speed-up")
    if place is not None:
        parts.append(f"{place.fraction:.0%} of the measured roofline ({place.bound}-bound)")
    return ", ".join(parts)


def _times(observation: Observation, place: Any) -> tuple[tuple[str, Any], ...]:
    found = observation.measurements
    outcome = observation.result.calls[0]
    evidence: list[tuple[str, Any]] = [("candidate", worker_timing(observation).to_json())]
    if found.get("reference timing") is not None:
        evidence.append(("reference", found["reference timing"].to_json()))
    if place is not None:
        evidence.append(("roofline", place.to_json()))
        evidence.append(("flops", found.get("flops")))
        evidence.append(("bytes", found.get("bytes")))
    clocked = found.get("auditor clock")
    if clocked is not None:
        evidence.append(("auditor's clock", clocked.to_json()))
    profile = outcome.kernels
    if profile is not None and profile.calls:
        evidence.append(("kernels", profile.to_json()))
        evidence.append(("event vs kernel", agreement(outcome.timing, profile)[1]))
    return tuple(evidence)
