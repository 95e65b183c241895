"""Races under load: calls on identical inputs compared bit for bit with a call made alone,
while other kernels keep every SM of the GPU busy, while several host threads call the
candidate at once on device streams of their own, and while unrelated work queued ahead of the
call on the caller's stream has yet to run (the inputs' values last in that queue).

The determinism check repeats calls on an idle device, where a kernel's blocks are placed and
paced the same way run after run. A race between blocks (a lock released before the value it
guards is stored, a flag read before the write it announces) or between calls (scratch kept in
a global and shared by every caller) shows when something else competes for the SMs, the
memory system or the candidate's state. A candidate that computes on a stream of its own
without first waiting for the stream it was called on reads its inputs before the work queued
ahead of it has written them: right alone, on an idle device, and wrong inside a program that
queues work.

Every float input is drawn as small integers, so sums in any order are exact: a bit that
differs is a lost, doubled or stale update, not a reassociation. A problem that declares itself
nondeterministic has every run held to the error budget instead. GPU only: a CPU has no
streams or SMs to contend for, and Triton's interpreter cannot be called from several threads.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from kernelaudit.checks.base import (
    NEEDS_CUDA,
    Failure,
    Observation,
    PlanContext,
    Probe,
    RunPlan,
    Step,
)
from kernelaudit.checks.execution import headline
from kernelaudit.checks.labels import output_name
from kernelaudit.checks.numerics import judge_results
from kernelaudit.checks.sweep import boundary_cases
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import result_sizes
from kernelaudit.inputs.materialize import GENERATOR, default_distribution, distributions_for
from kernelaudit.problem.spec import Problem, TensorInput
from kernelaudit.profiles import Profile
from kernelaudit.runner.auditor.limits import machine_memory

KEPT_SHARE = 8
"""The results one probe keeps (every run's, for a nondeterministic problem) are held to the
host's memory divided by this: the worker holds them, then the auditor does."""

EXACT = "small_integers"
"""The distribution every float input is drawn from: sums of its values are exact."""


class Races:
    name: ClassVar[str] = "races"
    summary: ClassVar[str] = (
        "calls under contention (other kernels on every SM, several host threads at once, "
        "unrelated work queued ahead on the caller's stream) agree bit for bit with a call "
        "made alone (GPU only)"
    )

    def unavailable(self, device: str, profile: Profile) -> str:
        return "" if device.startswith("cuda") else NEEDS_CUDA

    def plan(self, ctx: PlanContext) -> list[Probe]:
        if not ctx.device.startswith("cuda"):
            return []
        case = exact_case(ctx)
        keep = not ctx.problem.contract.deterministic  # judged by values, not by bits
        profile = ctx.profile
        # every run's results kept, as a nondeterministic problem's are, fill the worker's
        # memory and then the auditor's: as many runs as fit in `KEPT_SHARE` of the host
        kept = kept_results(ctx.problem, case) if keep else None
        probes = []
        if profile.race_runs > 0:
            runs = _fitting(profile.race_runs, 1, kept)
            noisy = (Step(noise=True, keep=keep),) * runs
            probes.append(Probe(self.name, case, RunPlan(steps=(Step(), *noisy))))
        if profile.race_threads > 1 and profile.race_rounds > 0:
            # a round keeps its own call's results and every thread's
            rounds = _fitting(profile.race_rounds, profile.race_threads + 1, kept)
            threaded = (Step(threads=profile.race_threads, keep=keep),) * rounds
            probes.append(Probe(self.name, case, RunPlan(steps=(Step(), *threaded))))
        if profile.race_queued > 0:
            runs = _fitting(profile.race_queued, 1, kept)
            queued = (Step(queued=True, keep=keep),) * runs
            probes.append(Probe(self.name, case, RunPlan(steps=(Step(), *queued))))
        return probes

    def judge(self, observation: Observation) -> list[Failure]:
        result = observation.result
        if observation.probe.check != self.name or result.error or len(result.calls) < 2:
            return []
        failures = _thread_errors(observation)
        if observation.problem.contract.deterministic:
            return _differences(observation) + failures
        return _over_budget(observation) + failures

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []


def kept_results(problem: Problem, case: Case) -> int | None:
    """The bytes of one call's results at `case` at their own dtypes (the declared outputs and
    the inputs the contract lets the call write); None where the case's sizes do not bind
    them."""
    sizes = result_sizes(problem, case)
    if any(count is None for count, _ in sizes):
        return None
    return sum(count * itemsize for count, itemsize in sizes if count is not None)


def _fitting(runs: int, per_run: int, kept: int | None) -> int:
    """Of `runs` runs keeping `per_run` results each (after the call made alone, kept too), as
    many as fit in `KEPT_SHARE` of the host's memory with results of `kept` bytes; one at
    least. Results whose size the case does not fix are not capped (the worker's own memory
    limit bounds them)."""
    if not kept:
        return runs
    fit = (machine_memory() // KEPT_SHARE // kept - 1) // per_run
    return max(1, min(runs, fit))


def exact_case(ctx: PlanContext) -> Case:
    """The first workload with every float input the problem does not generate itself drawn
    as small integers."""
    case = boundary_cases(ctx, 0)[0]
    for inp in ctx.problem.inputs:
        if not isinstance(inp, TensorInput) or inp.role == "saved":
            continue
        if default_distribution(inp, ctx.problem) == GENERATOR:
            continue  # the problem's own generator keeps the inputs consistent with each other
        if EXACT in distributions_for(inp, ctx.problem):
            case = case.with_value(inp.name, EXACT)
    return case


def _condition(observation: Observation, call: int, runner: int) -> str:
    step = observation.probe.plan.sequence()[call]
    if runner >= 0:
        return "threads"
    if step.queued:
        return "queued"
    return "noise" if step.noise else "alone"


def _who(observation: Observation, call: int, runner: int) -> str:
    """How a person names one run: "run 7 under noise", "thread 2 of 4 (round 1)"."""
    condition = _condition(observation, call, runner)
    if condition == "threads":
        threads = observation.probe.plan.sequence()[call].threads
        return f"thread {runner + 1} of {threads} calling at once (round {call})"
    if condition == "noise":
        return f"run {call} under noise"
    if condition == "queued":
        return f"run {call} behind work queued on the caller's stream"
    return f"the call made alone before round {call}"


def _differences(observation: Observation) -> list[Failure]:
    """One failure per output and condition: the run that differs most, and how many did."""
    result = observation.result
    found: dict[tuple[str, int], list[tuple[int, int, int, int, float]]] = {}
    runs = {"noise": 0, "threads": 0, "queued": 0, "alone": 0}
    for call, outcome in enumerate(result.calls[1:], start=1):
        step = observation.probe.plan.sequence()[call]
        runs["threads"] += step.threads
        runs[_condition(observation, call, -1)] += 1
        for runner, output, count, first, largest in outcome.mismatches:
            condition = _condition(observation, call, runner)
            found.setdefault((condition, output), []).append((call, runner, count, first, largest))
    failures = []
    for (condition, output), seen in found.items():
        call, runner, count, first, largest = max(seen, key=lambda m: m[2])
        name = output_name(observation.problem, output)
        shape = _shape(observation, call, output)
        numel = max(1, math.prod(shape))
        differing_runs = len({(c, r) for c, r, *_ in seen})
        title = (
            f"{name!r}: {_who(observation, call, runner)} differs from the call alone in "
            f"{count} of {numel} elements (largest difference {largest:.3g}); "
            f"{differing_runs} of {runs[condition]} such runs differ"
        )
        evidence: list[tuple[str, Any]] = [
            ("output", name),
            ("condition", condition),
            ("run", _who(observation, call, runner)),
            ("differing elements", count),
            ("first index", _index(first, shape)),
            ("largest difference", largest),
            ("runs that differ", f"{differing_runs} of {runs[condition]}"),
        ]
        if condition == "noise":
            kernels = result.calls[call].noise_kernels
            evidence.append(("noise kernels launched on a side stream", kernels))
        if condition == "queued":
            kernels = result.calls[call].noise_kernels
            evidence.append(("kernels queued ahead of the inputs' values", kernels))
        failures.append(
            Failure(
                key=f"differs-{condition}:{name}",
                title=title,
                evidence=tuple(evidence),
                score=count / numel,
            )
        )
    return failures


def _over_budget(observation: Observation) -> list[Failure]:
    """For a nondeterministic problem: the first run (or thread) whose results fall outside
    the error budget. Where the first call, made alone, is already outside it (the case's
    values are beyond what the computation keeps: the numerics check's matter, not a race), a
    run counts only where it errs more than that call."""
    result = observation.result
    alone = {f.key: f.score for f in judge_results(observation, 0)}
    for call, outcome in enumerate(result.calls[1:], start=1):
        runs: list[tuple[int, tuple[torch.Tensor, ...] | None]] = [(-1, None)]
        runs += list(enumerate(outcome.thread_outputs))
        for runner, outputs in runs:
            if outputs is not None and not outputs:
                continue  # a thread that failed: reported on its own
            for failure in judge_results(observation, call, outputs):
                if failure.key in alone and failure.score <= alone[failure.key]:
                    continue
                condition = _condition(observation, call, runner)
                return [
                    Failure(
                        key=f"{condition}-error:{failure.key}",
                        title=f"{_who(observation, call, runner)}: {failure.title}",
                        evidence=(("condition", condition), *failure.evidence),
                        score=failure.score,
                    )
                ]
    return []


def _thread_errors(observation: Observation) -> list[Failure]:
    for call, outcome in enumerate(observation.result.calls):
        for runner, error in enumerate(outcome.thread_errors):
            if error:
                who = _who(observation, call, runner)
                return [
                    Failure(
                        key="thread-error",
                        title=f"{who} failed: {headline(error)}",
                        evidence=(("run", who), ("message", error[-4000:])),
                        severity="warn",
                    )
                ]
    return []


def _shape(observation: Observation, call: int, output: int) -> tuple[int, ...]:
    first = observation.result.calls[0].outputs
    if output < len(first):
        return tuple(first[output].shape)
    truth = observation.expected_at(call).truth
    return tuple(truth[output].shape) if output < len(truth) else ()


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    if not shape:
        return ()
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape))
