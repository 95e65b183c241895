"""Stateful replay: outputs must follow the inputs of the call that produced them.

Three sequences, each call judged against the truth of its own inputs:
- same buffers, new contents: call 2 gets call 1's very tensors (same address) updated in place
  with new values as an optimizer's step updates a weight (their version counters move), so a
  cache keyed on `data_ptr`, `id()` or the shape answers with call 1's result; call 3 gets them
  rewritten once more without moving the counters (as writes through `.data`, DLPack or NumPy
  do), so a cache keyed on the version counter answers with call 2's. A result cached that way
  (call 2's very bits again) fails: it is how a kernel serves a timed loop on the same tensors.
  State derived from an input and cached that way (a packed weight) follows every update
  autograd sees, and is reported as a warning that says which writes it misses;
- A, B, A on fresh inputs: a result that lags one call, or is cached by shape, shows at B;
- a long warm-up on the same inputs, then a call on new ones: behaviour that changes after a
  number of calls (a call counter, a cache warmed on the way) shows at the end.
A candidate whose first call already fails numerics is left to the numerics check for its
values, but a later call on other inputs that returns the first call's very bits (and they are
not one constant) still shows a result that does not follow its inputs: a cache is confirmed
whatever the kernel's accuracy. And the same sequence runs again, as a follow-up, at the
smallest of the first boundary shapes, where a kernel wrong at the base workload (a sum that
loses precision as it grows, say) may be right: there every call is judged as above, so a cache
keyed on the version counter or derived state shows too."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

import torch

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe, RunPlan, Step
from kernelaudit.checks.labels import output_name
from kernelaudit.checks.numerics import judge_results
from kernelaudit.checks.sweep import boundary_cases
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import case_elements
from kernelaudit.runner.boundary.messages import changed

_SEQUENCES = {
    "same-buffers": "call 2 got call 1's input tensors (same address) updated in place with new "
    "values, as an optimizer's step updates a weight",
    "a-b-a": "calls on inputs A, B, A, each on fresh tensors",
    "warm-up": "a call on new inputs after {n} calls on the same inputs",
}
_UNVERSIONED = (
    "call 3 got the same tensors rewritten with other values without moving their version counters"
)
_MISSED_WRITES = (
    "a caller who writes a tensor without moving its counter (through `.data`, DLPack or "
    "NumPy, or a CUDA graph's static inputs refilled that way)"
)


ELSEWHERE = 4
"""Boundary shapes among which a sequence wrong from its first call is run again (the
smallest of them)."""


class Replay:
    name: ClassVar[str] = "replay"
    summary: ClassVar[str] = (
        "outputs follow their inputs: reused buffers with new contents, A/B/A sequences and "
        "calls after a long warm-up"
    )

    def __init__(self) -> None:
        self._elsewhere: Case | None = None
        self._wrong_first: set[Probe] = set()

    def plan(self, ctx: PlanContext) -> list[Probe]:
        cases = boundary_cases(ctx, ELSEWHERE)
        others = [c for c in cases[1:] if c.sizes != cases[0].sizes]
        self._elsewhere = min(
            others, key=lambda c: case_elements(ctx.problem, c.size_map()), default=None
        )
        self._wrong_first = set()
        return self._sequences(ctx, cases[0])

    def _sequences(self, ctx: PlanContext, a: Case) -> list[Probe]:
        b = replace(a, seed=a.seed + 101)
        warmup = max(1, ctx.profile.warmup_calls)
        return [
            Probe(
                self.name,
                a,
                RunPlan(steps=(Step(), Step(case=b, reuse=0, updated=True), Step(reuse=0))),
            ),
            Probe(self.name, a, RunPlan(steps=(Step(), Step(case=b), Step()))),
            Probe(
                self.name,
                a,
                RunPlan(steps=(Step(),) + (Step(keep=False),) * warmup + (Step(case=b),)),
            ),
        ]

    def judge(self, observation: Observation) -> list[Failure]:
        result = observation.result
        if observation.probe.check != self.name or result.error or not result.calls:
            return []
        steps = observation.probe.plan.sequence()
        sequence = _sequence(steps)
        if judge_results(observation, 0):
            # wrong from the first call: its values are the numerics check's, not a replay's;
            # the sequence runs again where the candidate may be right (`followups`)
            self._wrong_first.add(observation.probe)
            return _repeated(observation, steps, sequence)
        failures = []
        for call in range(1, len(result.calls)):
            if not steps[call].keep:
                continue
            unversioned = steps[call].reuse is not None and not steps[call].updated
            for failure in judge_results(observation, call):
                if unversioned:  # every earlier call followed its inputs
                    failures.append(_version_cache(observation, failure, call, len(steps)))
                    continue
                described = _SEQUENCES[sequence].format(n=len(steps) - 2)
                failures.append(
                    Failure(
                        key=f"{sequence}:{failure.key}",
                        title=f"call {call + 1} of {len(steps)} ({described}) returned results "
                        f"that do not follow its inputs: {failure.title}",
                        evidence=(("sequence", described), ("call", call), *failure.evidence),
                        score=failure.score,
                    )
                )
            if failures:
                break
        failures += _drift(observation, steps)
        return failures

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        """The sequence whose first call was wrong, again at the smallest boundary shape."""
        probe = observation.probe
        if probe not in self._wrong_first or self._elsewhere is None:
            return []
        self._wrong_first.discard(probe)
        a = replace(self._elsewhere, seed=probe.case.seed)
        b = replace(a, seed=a.seed + 101)
        # the same calls, with the base workload's cases A and B moved to the other shape
        steps = tuple(
            replace(step, case=b) if step.case is not None else step
            for step in probe.plan.sequence()
        )
        return [Probe(self.name, a, replace(probe.plan, steps=steps), rank=probe.rank)]


def _version_cache(observation: Observation, failure: Failure, call: int, calls: int) -> Failure:
    """A call on inputs rewritten without moving their version counters that does not follow
    them, after every earlier call did: a cache keyed on the version counters. The results
    themselves cached (the previous call's bits again) fail; state derived from the inputs
    and cached (the results are wrong otherwise) is a warning."""
    outputs, previous = (observation.result.calls[i].outputs for i in (call, call - 1))
    repeated = len(outputs) == len(previous) and all(
        a.shape == b.shape and torch.equal(a, b) for a, b in zip(outputs, previous, strict=True)
    )
    where = f"call {call + 1} of {calls} ({_UNVERSIONED})"
    if repeated:
        kind, severity = "version-result", "fail"
        title = (
            f"results cached by the inputs' version counters: {where} returned bit for bit "
            f"call {call}'s results, so a timed loop on the same tensors is served from the "
            f"cache and {_MISSED_WRITES} gets stale results"
        )
    else:
        kind, severity = "version", "warn"
        title = (
            "state cached by the inputs' version counters: it follows in-place updates (an "
            f"optimizer's step), but {where} gave results that do not follow them, as "
            f"{_MISSED_WRITES} would get"
        )
    return Failure(
        key=f"same-buffers:{kind}:{failure.key}",
        title=f"{title}: {failure.title}",
        evidence=(("sequence", _UNVERSIONED), ("call", call), *failure.evidence),
        score=failure.score,
        severity=severity,
    )


def _sequence(steps: tuple[Step, ...]) -> str:
    if any(step.reuse is not None for step in steps):
        return "same-buffers"
    if any(not step.keep for step in steps):
        return "warm-up"
    return "a-b-a"


def _repeated(observation: Observation, steps: tuple[Step, ...], sequence: str) -> list[Failure]:
    """A call on other inputs whose results are bit for bit the first call's, where the truth
    of the two differs and the first call's results are not one constant (a kernel that ignores
    its inputs altogether is the numerics check's)."""
    calls = observation.result.calls
    first = calls[0].outputs
    if not any(t.numel() > 1 and bool((t != t.flatten()[0]).any()) for t in first):
        return []
    for call in range(1, len(calls)):
        outputs = calls[call].outputs
        if steps[call].case is None or not steps[call].keep or len(outputs) != len(first):
            continue
        same = all(
            a.shape == b.shape and torch.equal(a, b) for a, b in zip(outputs, first, strict=True)
        )
        truths = zip(
            observation.expected_at(call).truth, observation.expected_at(0).truth, strict=True
        )
        if same and any(not torch.equal(a, b) for a, b in truths):
            described = _SEQUENCES[sequence].format(n=len(steps) - 2)
            return [
                Failure(
                    key=f"{sequence}:repeated",
                    title=f"call {call + 1} of {len(steps)} ({described}) returned bit for bit "
                    "what call 1 returned on other inputs: its results do not follow its "
                    "inputs (a cache), besides the first call being wrong",
                    evidence=(("sequence", described), ("call", call)),
                )
            ]
    return []


def _drift(observation: Observation, steps: tuple[Step, ...]) -> list[Failure]:
    """Identical inputs during a warm-up must give identical bits (deterministic problems)."""
    if not observation.problem.contract.deterministic:
        return []
    calls = observation.result.calls
    # calls on the first call's inputs as fresh tensors (rewritten buffers are judged above)
    same = [
        i
        for i, step in enumerate(steps)
        if step.case is None and step.reuse is None and i < len(calls)
    ]
    if len(same) < 2:
        return []
    first = calls[same[0]].fingerprints
    for i in same[1:]:
        differ = changed(first, calls[i].fingerprints)
        if differ:
            name = output_name(observation.problem, differ[0])
            return [
                Failure(
                    key=f"drift:{name}",
                    title=f"output {name!r} changed at call {i + 1} although the inputs were "
                    "those of call 1: the candidate behaves differently after repeated calls",
                    evidence=(("output", name), ("call", i), ("calls", len(steps))),
                )
            ]
    return []
