"""Triton bounds: every load, store and atomic of the candidate's Triton kernels stays inside
the tensor it addresses, at the audit's smallest boundary shapes.

The candidate is run once more, in a process of its own, under Triton's interpreter on the CPU
(on a GPU machine too), and every access of every program is checked lane by lane against the
tensors its kernel was launched with (see `kernelaudit.interpret`). Masks are honoured: a lane
masked off is never checked, however wild its address. A finding names the kernel, its pointer
argument, the kind of access and the offending offsets in elements of that argument.

The guard bands of the bounds check see only writes that land next to a tensor and change a
byte; this check sees reads too, writes of the value already there, and accesses that land
anywhere. The run starts in the background while the audit plans, and is collected once the
probes are judged. A candidate that launches no Triton kernel gets nothing from this check.
An autograd-enabled candidate (`Contract(gradients=...)`) runs differentiated, as the audit of
its backward runs it: its forward, then autograd's backward with upstream gradients, so the
kernels of both are watched.

A case the interpreter cannot be expected to get through within a call's time limit (its
estimate on a CPU, `kernelaudit.inputs.cost`, past `profile.timeout_s`) is left out before its
inputs are made: a mixture-of-experts layer's billions of weight elements would otherwise be
drawn and written to disk for a run that could only time out. The report says which cases
were left out, and the check counts as not run when none is left.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from kernelaudit.checks.base import ConcludingOnly, Failure, PlanContext, Probe, note
from kernelaudit.checks.sweep import shapes_for
from kernelaudit.engine.calls import call_for
from kernelaudit.errors import CaseUnavailable
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import case_elements, cost_model
from kernelaudit.inputs.materialize import GENERATOR, default_distribution, materialize
from kernelaudit.interpret.records import Interpretation, OutOfBounds
from kernelaudit.interpret.run import InterpretedRun
from kernelaudit.problem.backward import autograd_signature, backward_problem
from kernelaudit.problem.dims import resolve_shape
from kernelaudit.problem.spec import IndexInput, Problem

_VERBS = {"load": "reads", "store": "writes", "atomic": "updates atomically"}

_STOPPED = ("unsupported", "timeout", "crash", "host-memory", "disk")
"""Why an interpreted run can end without having watched anything, the candidate's fault or
not: a note says so even when no kernel had launched yet."""

_HOW = (
    "the candidate ran under Triton's interpreter on the CPU, its tensors between guard bands; "
    "every active (mask-true) lane of every load, store and atomic was compared with the bytes "
    "of the launch's tensor arguments, and the lanes outside were switched off (loads got 0 or "
    "`other`, stores were dropped)"
)


class TritonBounds(ConcludingOnly):
    name: ClassVar[str] = "triton-bounds"
    summary: ClassVar[str] = (
        "every load, store and atomic of the candidate's Triton kernels stays inside the "
        "tensor it addresses (each lane checked under Triton's interpreter on the CPU)"
    )

    def __init__(self) -> None:
        super().__init__()
        self._cases: list[Case] = []
        self._run: InterpretedRun | None = None
        self._unwatched = ""
        self._idle = ""
        self._too_long: tuple[_TooLong, ...] = ()

    def not_applicable(self, ctx: PlanContext) -> str:
        return self._idle

    def not_run(self, ctx: PlanContext) -> str:
        """Why the interpreted run checked no access at all, once it has ended: no case could
        be got through within a call's time limit, or the run timed out, crashed or met an
        interpreter it cannot watch before any kernel launched."""
        return self._unwatched

    def plan(self, ctx: PlanContext) -> list[Probe]:
        if ctx.candidate is None:
            return []
        if ctx.problem.contract.gradients and ctx.candidate.autograd is None:
            ctx = differentiated(ctx)
        candidate = ctx.candidate
        assert candidate is not None
        self._cases, calls = [], []
        chosen = interpreted_cases(ctx)
        estimates = (_TooLong.of(ctx, case) for case in chosen)
        self._too_long = tuple(t for t in estimates if t.seconds > t.limit_s)
        left_out = {t.case for t in self._too_long}
        for case in chosen:
            if case in left_out:
                continue
            try:
                inputs = materialize(ctx.problem, case)
            except CaseUnavailable:
                continue  # the problem cannot make inputs at these sizes
            self._cases.append(case)
            calls.append(call_for(ctx.problem, case, inputs))
        if not calls and self._too_long:
            least = min(self._too_long, key=lambda t: t.seconds)
            self._unwatched = f"Triton's interpreter {least.describe()}"
            return []
        if not calls:
            self._idle = "the problem can make no input at the interpreted sizes"
            return []
        self._run = InterpretedRun(
            candidate,
            calls,
            [inp.name for inp in ctx.problem.inputs],
            [out.name for out in ctx.problem.outputs],
            ctx.profile.timeout_s * max(1, len(calls)),
            ctx.profile.host_memory_bytes,
        )
        return []

    def conclude(self, found: Sequence[tuple[str, Failure]]) -> list[Failure]:
        if self._run is None:
            return []
        seen = self._run.finish()
        self._run = None
        if seen.cause in ("too-large", "bad-result"):
            # no honest run leaves it: a failure of the candidate's, whatever else it did
            return [
                Failure(
                    key=f"result-{seen.cause}",
                    title=f"the interpreted bounds check's {seen.error}",
                    evidence=(("reason", seen.error),),
                )
            ]
        if not seen.launched and (not seen.error or seen.cause == "no-triton"):
            self._idle = "the candidate launched no Triton kernel"
        if seen.error and seen.cause in _STOPPED and not seen.launched:
            stopped = "the interpreted run stopped before any kernel launched"
            self._unwatched = f"{stopped}: {seen.error}"
        failures = [
            _failure(group, self._cases, seen.dropped) for group in _grouped(seen.out_of_bounds)
        ]
        stopped = _stopped(seen, found)
        if seen.launched and self._too_long:
            failures.append(_left_out(self._too_long))
        return failures + ([stopped] if stopped is not None else [])


@dataclass(frozen=True)
class _TooLong:
    """An interpreted case and the estimated seconds of one call of it under the interpreter
    (`inputs.cost`, on a CPU), left out where they pass a call's time limit."""

    case: Case
    elements: int
    seconds: float
    limit_s: float

    @classmethod
    def of(cls, ctx: PlanContext, case: Case) -> _TooLong:
        elements = case_elements(ctx.problem, case.size_map())
        seconds = cost_model("cpu").seconds(elements)
        return cls(case, elements, seconds, ctx.profile.timeout_s)

    def describe(self) -> str:
        return (
            f"would take about {self.seconds:,.0f} s a call at {self.case.label} "
            f"({self.elements:,} elements), past the {self.limit_s:.0f} s a call may take"
        )


def _left_out(too_long: Sequence[_TooLong]) -> Failure:
    described = "; ".join(
        f"{t.case.label} (about {t.seconds:,.0f} s a call, {t.elements:,} elements)"
        for t in too_long
    )
    return note(
        "not-watched:too-large",
        f"the interpreted bounds check left out {len(too_long)} case(s): {described}, past "
        f"the {too_long[0].limit_s:.0f} s a call may take",
        tuple((t.case.label, t.describe()) for t in too_long),
    )


def interpreted_cases(ctx: PlanContext) -> list[Case]:
    """`profile.interpreted_cases` of the audit's boundary shapes: the cheapest of each axis
    (an axis of size 1, most often), then each axis at its largest size one past a power of
    two (a last tile with a single live element, after full ones), then the rest, cheapest
    first. Index inputs are drawn with their first and last ids common, where off-by-one
    indexing shows."""
    problem = ctx.problem
    shapes = shapes_for(ctx)
    boundary = [s for s in shapes if s[1].startswith("boundary ")] or shapes[:1]
    by_cost = sorted(boundary, key=lambda shape: _elements(problem, shape[0]))
    cheapest: dict[str, tuple[dict[str, int], str]] = {}
    past_a_tile: dict[str, tuple[dict[str, int], str]] = {}
    for sizes, label in by_cost:
        axis, _, size = label.split()[-1].partition("=")
        cheapest.setdefault(axis, (sizes, label))
        if size.isdigit() and int(size) > 2 and (int(size) - 1) & (int(size) - 2) == 0:
            past_a_tile[axis] = (sizes, label)  # the largest: past the most full tiles
    first = list(cheapest.values())
    second = [s for s in by_cost if s in past_a_tile.values() and s not in first]
    ordered = first + second + [s for s in by_cost if s not in first and s not in second]
    values = tuple(
        sorted(
            (inp.name, "boundary")
            for inp in problem.inputs
            if isinstance(inp, IndexInput) and default_distribution(inp, problem) != GENERATOR
        )
    )
    return [
        Case(tuple(sizes.items()), 0, values, (), 0, label)
        for sizes, label in ordered[: max(1, ctx.profile.interpreted_cases)]
    ]


def _elements(problem: Problem, sizes: dict[str, int]) -> int:
    """Elements of every tensor input and output at `sizes`: what the interpreter walks."""
    shapes = [inp.shape for inp in problem.tensor_inputs] + [o.shape for o in problem.outputs]
    return sum(math.prod(resolve_shape(shape, sizes)) for shape in shapes)


def _grouped(found: Sequence[OutOfBounds]) -> list[list[OutOfBounds]]:
    """The same kernel, argument and access kind across calls, in order of first call; lanes
    outside every argument apart from lanes that only reached another argument."""
    groups: dict[tuple[str, str, str, bool], list[OutOfBounds]] = {}
    for item in sorted(found, key=lambda o: o.call):
        key = (item.kind, item.kernel, item.argument, item.outside > 0)
        groups.setdefault(key, []).append(item)
    return list(groups.values())


def _failure(group: list[OutOfBounds], cases: list[Case], dropped: int) -> Failure:
    first = group[0]
    case = cases[first.call] if first.call < len(cases) else None
    at = case.describe().split(" | ")[0] if case is not None else f"call {first.call + 1}"
    argument = first.argument + (f" ({first.tensor})" if first.tensor else "")
    count = f"{first.lanes} element{_plural(first.lanes)}"
    offsets = (
        f"offset {first.lowest}"
        if first.lowest == first.highest
        else (f"offsets {first.lowest}..{first.highest}")
    )
    if first.outside == 0:
        title = (
            f"kernel {first.kernel} {_VERBS[first.kind]} through {argument} into "
            f"{', '.join(first.others)} at {at} ({count}, {offsets} of {first.argument})"
        )
        key = f"elsewhere:{first.kind}:{first.kernel}:{first.argument}"
        severity = "warn"
    else:
        title = (
            f"kernel {first.kernel} {_VERBS[first.kind]} {count} {_where(first)} {argument} at "
            f"{at} ({offsets}; it has {first.elements} element{_plural(first.elements)})"
        )
        key = f"{first.kind}:{first.kernel}:{first.argument}"
        severity = "fail"
    evidence: list[tuple[str, Any]] = [
        ("kernel", first.kernel),
        ("argument", first.argument),
        ("tensor", first.tensor or "not one the problem names"),
        ("access", first.kind),
        ("case", f"{case.label}: {case.describe()}" if case is not None else first.call),
        ("out-of-bounds element accesses", first.lanes),
        ("accesses with out-of-bounds lanes", first.accesses),
        ("offsets (elements from the argument's first)", list(first.offsets)),
        ("offset range", [first.lowest, first.highest]),
        ("argument elements", f"{first.elements} x {first.dtype}"),
        ("elements past the end", first.past_end),
        ("elements before the start", first.before_start),
        ("source", list(first.lines)),
        ("first program (program ids)", list(first.program)),
        ("grid", list(first.grid)),
    ]
    if first.others:
        evidence.append(("lanes landing in other arguments", list(first.others)))
    evidence.append(
        (
            "cases",
            {
                (cases[o.call].label if o.call < len(cases) else f"call {o.call + 1}"): o.lanes
                for o in group
            },
        )
    )
    if dropped:
        evidence.append(("further groups of out-of-bounds lanes not recorded", dropped))
    evidence.append(("how", _HOW))
    return Failure(
        key=key,
        title=title,
        evidence=tuple(evidence),
        severity=severity,
        score=float(sum(o.lanes for o in group)),
    )


def _plural(count: int) -> str:
    return "" if count == 1 else "s"


def _where(found: OutOfBounds) -> str:
    if found.past_end and found.before_start:
        return "outside"
    return "past the end of" if found.past_end else "before the start of"


def _stopped(seen: Interpretation, found: Sequence[tuple[str, Failure]]) -> Failure | None:
    """A note when the run could not watch everything it set out to, where that says something:
    never for a candidate that launched no Triton kernel (or when Triton is absent), nor for an
    exception the execution check already reports as a failure."""
    if not seen.error or seen.cause == "no-triton":
        return None
    if seen.cause not in _STOPPED and not seen.launched:
        return None
    execution_failed = any(
        check == "execution" and failure.severity == "fail" for check, failure in found
    )
    if seen.cause == "candidate" and execution_failed:
        return None
    return Failure(
        key=f"not-watched:{seen.cause}",
        title=f"the interpreted bounds check could not watch every call: {seen.error}",
        evidence=(
            ("reason", seen.error),
            ("calls finished", seen.calls_done),
            ("kernels launched", dict(seen.launches)),
        ),
        # writing past a folder's bound is not what a kernel's run does; the rest may be
        severity="fail" if seen.cause == "disk" else "note",
    )


def differentiated(ctx: PlanContext) -> PlanContext:
    """`ctx` for the candidate's backward: the problem of its gradients (`backward_problem`)
    and the candidate differentiated through autograd, which runs its forward first."""
    assert ctx.candidate is not None
    candidate = replace(ctx.candidate, autograd=autograd_signature(ctx.problem))
    return replace(ctx, problem=backward_problem(ctx.problem), candidate=candidate)
