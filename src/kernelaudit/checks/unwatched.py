"""Unwatched: the candidate called as a user's program would call it still gives the truth.

Every other check calls the candidate inside kernelaudit's worker, and a candidate can look
for that: the harness's modules in its interpreter, its threads, guard bands next to its
inputs, poisoned memory. This check starts the candidate once more in a process of its own
through `kernelaudit.plain`: a short script that imports nothing but torch and the candidate,
plain tensors, plain `torch.empty`, and calls it on the first workload again and again, as a
training or serving loop does, until `MOST_CALLS` calls or `SECONDS` have gone by. The first
and the last call's results are judged against the fp64 truth by the same error budget as
every case. A candidate that is right only while watched, or goes wrong after many calls or
in a second process, fails here. It runs beside the probes (a device-wide quiet waits for
it before a probe that measures the device).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, ClassVar

from kernelaudit.checks.base import ConcludingOnly, Failure, PlanContext, Probe, note
from kernelaudit.checks.execution import headline
from kernelaudit.checks.numerics import compare_expected, comparison_evidence
from kernelaudit.checks.sweep import shapes_for
from kernelaudit.engine.calls import call_for, reply_limit
from kernelaudit.engine.host_memory import cache_bytes, host_bytes
from kernelaudit.errors import ProblemError
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import materialize
from kernelaudit.plain.run import PlainRun, run_plain

MOST_CALLS = 1000
SECONDS = 2.0
"""A long run of calls, as a loop makes them, bounded by both: cheap kernels get many calls,
costly ones a few."""

_TIMEOUT_FACTOR = 4
"""The run may take this many times the profile's per-call timeout (starting the process,
importing torch and the candidate, and compiling its kernels come on top of the calls)."""


class Unwatched(ConcludingOnly):
    name: ClassVar[str] = "unwatched"
    summary: ClassVar[str] = (
        "called as a user's program calls it (a fresh process, no harness, plain tensors, "
        "many calls), the candidate still matches the truth"
    )

    def __init__(self) -> None:
        super().__init__()
        self._case: Case | None = None
        self._inputs: dict[str, Any] | None = None
        """The plain run's inputs, where kept for its judgement (`plan`)."""
        self._running: Future[PlainRun] | None = None
        self._not_run = ""

    def not_run(self, ctx: PlanContext) -> str:
        """Why no plain run was judged, once the audit has ended: it could not start."""
        return self._not_run

    def plan(self, ctx: PlanContext) -> list[Probe]:
        super().plan(ctx)
        self._not_run = ""
        if ctx.candidate is None or ctx.candidate.autograd is not None:
            # a candidate judged through its backward is called by the gradients pass
            return []
        shapes = shapes_for(ctx)
        if not shapes:
            return []
        sizes, label = shapes[0]
        self._case = Case(tuple(sizes.items()), 0, (), (), 0, label)
        inputs = dict(materialize(ctx.problem, self._case))
        call = call_for(ctx.problem, self._case, inputs)
        # kept for the judgement where they fit the kept cases' share, made again for it
        # otherwise: held from planning to the end, they sat beside every case the audit made
        self._inputs = inputs if host_bytes(inputs.values()) <= cache_bytes() else None
        del inputs
        names = [i.name for i in ctx.problem.inputs]
        mutates = tuple(names.index(name) for name in ctx.problem.contract.mutates)
        limit = reply_limit(ctx.problem, [self._case], ctx.profile.host_memory_bytes or 1 << 34)
        background = ThreadPoolExecutor(1)
        self._running = background.submit(
            run_plain,
            ctx.candidate,
            [call],
            mutates,
            ctx.device,
            MOST_CALLS,
            SECONDS,
            ctx.profile.timeout_s * _TIMEOUT_FACTOR,
            limit,
            ctx.profile.host_memory_bytes,
        )
        background.shutdown(wait=False)  # the thread ends with its one run
        del call  # handed over: the run lets it go once written
        return []

    def quiet(self) -> None:
        """Wait until the plain run is over (it shares the device)."""
        if self._running is not None:
            wait([self._running])

    def conclude(self, found: Sequence[tuple[str, Failure]]) -> list[Failure]:
        ctx, case, running = self.context, self._case, self._running
        kept, self._inputs, self._running = self._inputs, None, None
        if ctx is None or case is None or running is None:
            return []
        try:
            run = running.result()
        except OSError as error:
            self._not_run = f"the plain run could not start: {error}"
            return [note("could-not-run", self._not_run)]
        setting = (("case", case.label), ("sizes", dict(case.sizes)), ("calls", run.calls))
        if run.kind == "load":
            # the worker imported it: a file a plain import cannot load (a package's relative
            # imports, say) is told, not failed
            return [
                Failure(
                    key="unwatched-load",
                    title="a plain script could not import the candidate that the audit's "
                    f"worker imported: {headline(run.error)}",
                    evidence=(*setting, ("message", run.error)),
                    severity="warn",
                )
            ]
        if run.kind:
            what = {"exception": f"raised: {headline(run.error)}"}.get(run.kind, run.error)
            return [
                Failure(
                    key=f"unwatched-{run.kind}",
                    title=f"called as a user's program calls it, at {case.label}: {what}",
                    evidence=(*setting, ("message", run.error)),
                )
            ]
        inputs = kept if kept is not None else materialize(ctx.problem, case)
        return _judged(ctx, case, dict(inputs), run, setting)


def _judged(
    ctx: PlanContext,
    case: Case,
    inputs: dict[str, Any],
    run: PlainRun,
    setting: tuple[tuple[str, Any], ...],
) -> list[Failure]:
    # imported here: the oracle imports the checks package
    from kernelaudit.oracle.compare import judging_device
    from kernelaudit.oracle.truth import expected

    config = ctx.problem.dtype_configs()[case.dtype_config]
    try:
        expect = expected(ctx.problem, inputs, config, ctx.device)
    except ProblemError as error:
        return [note("not-run:reference", f"not judged: {error}", setting)]
    failures = []
    for which, (outputs, changed) in (("first", run.first), ("last", run.last)):
        values = (*outputs, *changed)
        if len(values) != len(expect.names):
            return [
                Failure(
                    key="unwatched-contract",
                    title=f"called as a user's program calls it, the {which} call gave "
                    f"{len(values)} results where {len(expect.names)} are declared",
                    evidence=setting,
                )
            ]
        for k, name in enumerate(expect.names):
            # on the device, the baseline's metrics kept for the second call's judging
            comparison = compare_expected(expect, k, values[k], judging_device(ctx.device))
            if comparison.passed:
                continue
            failures.append(
                Failure(
                    key=f"unwatched-{comparison.failure}:{name}",
                    title=f"called as a user's program calls it (a fresh process, no harness, "
                    f"{run.calls} calls), the {which} call at {case.label}: {comparison.reason}",
                    evidence=(*setting, ("call", which), *comparison_evidence(comparison)),
                    score=max((m.error_ratio for m in comparison.errors), default=1.0),
                )
            )
        if failures:
            return failures + _state(run, setting)
    return [
        *_state(run, setting),
        note(
            "matches",
            f"called {run.calls} times in {run.seconds:.2f} s as a user's program calls it, the "
            "first and last calls match the truth",
            setting,
        ),
    ]


def _state(run: PlainRun, setting: tuple[tuple[str, Any], ...]) -> list[Failure]:
    """The flags a plain process shows changed by importing and calling the candidate: read
    there by the plain script, which nothing of the candidate's process can have rebound
    (the worker's own look, `global-state`, is made by code the candidate can reach)."""
    return [
        Failure(
            key=f"unwatched-state:{change.name}",
            title=f"called as a user's program calls it, importing and calling the candidate "
            f"changed {change.name}: {change.before} -> {change.after}",
            evidence=(
                *setting,
                ("state", change.name),
                ("before", change.before),
                ("after", change.after),
            ),
        )
        for change in run.state_changes
    ]
