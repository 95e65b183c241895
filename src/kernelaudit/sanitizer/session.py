"""One audit's sanitizer runs: the child once without the sanitizer (to list the candidate's
kernels and to time it), then under each of the profile's tools in turn while its budget
lasts, and the reference's kernels on the same cases, listed in the auditor's own process."""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from kernelaudit.errors import UsageError
from kernelaudit.inputs.case import Case
from kernelaudit.problem.spec import Problem
from kernelaudit.profiles import Profile
from kernelaudit.runner.candidate import CandidateRef
from kernelaudit.sanitizer.attribution import is_library_kernel, kernel_base
from kernelaudit.sanitizer.cases import Arguments, arguments, small_cases
from kernelaudit.sanitizer.child import ChildResult, Launched, read_result, write_request
from kernelaudit.sanitizer.report import Output, parse
from kernelaudit.sanitizer.run import (
    Run,
    child_command,
    environment,
    run,
    sanitizer_command,
)

CALLS = 2
"""Calls of the candidate per case: the second finds the state the first left behind."""

MIN_RUN_S = 20.0
"""A tool is not started with less of the budget left: it could not even load torch."""

RACECHECK_POLICIES = ("never", "shared", "shared-or-unknown")
"""When racecheck runs: never; on the candidate's kernels known to use shared memory; on those
and on the ones whose use of it is unknown."""

_LISTABLE_TOOLS = ("memcheck", "initcheck", "synccheck")

PLAIN_LIMIT_FACTOR = 4
"""The run without the sanitizer may take this many times the profile's per-call timeout
(importing the candidate may compile it)."""


@dataclass(frozen=True)
class ToolRun:
    """One tool's run and what it printed (None when it printed no log)."""

    run: Run
    output: Output | None
    kernels: tuple[str, ...] = ()
    """The kernel-name filters it ran with (none: every kernel)."""


@dataclass(frozen=True)
class Session:
    """Everything the sanitizer check judges.

    cases: what each case is, in the order the child ran them.
    skipped: (tool, why) for each tool of the profile that did not run.
    reference_kernels: the names of the kernels the reference launches on the same cases.
    """

    cases: tuple[str, ...]
    plain: Run
    plain_result: ChildResult | None
    tools: tuple[ToolRun, ...]
    skipped: tuple[tuple[str, str], ...]
    reference_kernels: tuple[str, ...]
    budget_s: float

    @property
    def candidate_kernels(self) -> tuple[Launched, ...]:
        return own_kernels(self.plain_result, self.reference_kernels)

    @property
    def sanitized_s(self) -> float:
        return sum(t.run.seconds for t in self.tools)

    @property
    def plain_s(self) -> float:
        """The plain run's seconds, less the time it spent listing kernels."""
        listing = self.plain_result.listing_s if self.plain_result is not None else 0.0
        return max(self.plain.seconds - listing, 0.0)


def own_kernels(
    result: ChildResult | None, reference_kernels: tuple[str, ...]
) -> tuple[Launched, ...]:
    """The kernels the plain run listed that are the candidate's own: library kernels and
    those the reference launches too left out."""
    listed = result.kernels if result is not None else ()
    theirs = {kernel_base(name) for name in reference_kernels}
    return tuple(
        k for k in listed if not is_library_kernel(k.name) and kernel_base(k.name) not in theirs
    )


def prepare(problem: Problem, count: int) -> tuple[list[Case], list[Arguments], list[str]]:
    """The small cases, their arguments, and why any case had to be left out."""
    cases, built, dropped = [], [], []
    for case in small_cases(problem, count):
        try:
            built.append(arguments(problem, case))
        except Exception as error:
            dropped.append(f"{case.label}: {type(error).__name__}: {error}")
            continue
        cases.append(case)
    return cases, built, dropped


def run_session(
    problem: Problem,
    candidate: CandidateRef,
    profile: Profile,
    device: str,
    executable: str,
    cases: list[Case],
    built: list[Arguments],
    budget_s: float | None = None,
    references: tuple[str, ...] | None = None,
    stop: threading.Event | None = None,
) -> Session:
    """Run the child plainly, then under every tool the profile names while the budget
    (`budget_s`, else `Profile.sanitizer_budget_s`) lasts (racecheck as
    `Profile.sanitizer_racecheck` says). `references`: the kernels the reference launches on
    the cases (`reference_kernels`), listed here when not given. Once `stop` is set, the run in
    progress is killed and no other starts."""
    budget = profile.sanitizer_budget_s if budget_s is None else budget_s
    if references is None:
        references = reference_kernels(problem, cases, device)
    env = environment(device)
    tools: list[ToolRun] = []
    skipped: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="kernelaudit-sanitizer-") as folder:
        work = Path(folder)
        plain_request, sanitized_request = work / "plain.pt", work / "sanitized.pt"
        write_request(plain_request, candidate, built, device, CALLS, list_kernels=True)
        write_request(sanitized_request, candidate, built, device, CALLS, list_kernels=False)
        limit = profile.timeout_s * PLAIN_LIMIT_FACTOR
        command = child_command(plain_request, work / "plain.json")
        plain = run("plain", command, env, limit, work / "plain.log", stop)
        plain_result = read_result(work / "plain.json")
        for tool, kernels, why_not in planned_tools(profile, plain_result, references):
            left = budget - sum(t.run.seconds for t in tools)
            if not why_not and plain_result is not None and plain_result.error:
                why_not = "the candidate could not be imported"
            if not why_not and stop is not None and stop.is_set():
                why_not = "the audit ended first"
            if not why_not and left < MIN_RUN_S:
                why_not = f"{left:.0f} s of the {budget:.0f} s budget left"
            if why_not:
                skipped.append((tool, why_not))
                continue
            log = work / f"{tool}.log"
            child = child_command(sanitized_request, work / f"{tool}.json")
            command = sanitizer_command(executable, tool, log, left, kernels, child)
            done = run(tool, command, env, left, log, stop)
            tools.append(ToolRun(done, parse(done.log, tool) if done.log else None, kernels))
    return Session(
        cases=tuple(f"{c.label}: {c.describe()}" for c in cases),
        plain=plain,
        plain_result=plain_result,
        tools=tuple(tools),
        skipped=tuple(skipped),
        reference_kernels=references,
        budget_s=budget,
    )


def planned_tools(
    profile: Profile, plain: ChildResult | None, reference_kernels: tuple[str, ...]
) -> list[tuple[str, tuple[str, ...], str]]:
    """(tool, kernel filters, why it does not run or "") in the order the tools run.

    racecheck looks only at shared memory, so it runs only on the candidate's kernels that
    use some, as the plain run's profile says; where that is unknown, only when the profile
    says "shared-or-unknown" (and then on every kernel when none could be listed)."""
    unknown_tools = [t for t in profile.sanitizer_tools if t not in _LISTABLE_TOOLS]
    if unknown_tools:
        raise UsageError(
            f"profile {profile.name!r}: sanitizer_tools names {unknown_tools[0]!r}; choose from "
            f"{', '.join(_LISTABLE_TOOLS)} (racecheck is set by sanitizer_racecheck)"
        )
    if profile.sanitizer_racecheck not in RACECHECK_POLICIES:
        raise UsageError(
            f"profile {profile.name!r}: sanitizer_racecheck is {profile.sanitizer_racecheck!r}; "
            f"choose from {', '.join(RACECHECK_POLICIES)}"
        )
    planned: list[tuple[str, tuple[str, ...], str]] = [
        (tool, (), "") for tool in profile.sanitizer_tools
    ]
    if profile.sanitizer_racecheck == "never":
        return planned
    with_unknown = profile.sanitizer_racecheck == "shared-or-unknown"
    own = own_kernels(plain, reference_kernels)
    using = [k for k in own if k.shared_bytes]
    unknown = [k for k in own if k.shared_bytes is None]
    if plain is None or not plain.kernels:
        why = "" if with_unknown else "the candidate's kernels could not be listed"
        planned.append(("racecheck", (), why))
    elif using or (with_unknown and unknown):
        chosen = using + (unknown if with_unknown else [])
        names = tuple(dict.fromkeys(kernel_base(k.name) for k in chosen))
        planned.append(("racecheck", names, ""))
    elif unknown:
        planned.append(("racecheck", (), "the candidate's use of shared memory is unknown"))
    else:
        planned.append(("racecheck", (), "no kernel of the candidate's uses shared memory"))
    return planned


def reference_kernels(problem: Problem, cases: list[Case], device: str) -> tuple[str, ...]:
    """The kernels the reference launches on `cases` at their own dtypes, listed by the
    profiler here, in the trusted process (none where the reference cannot be profiled)."""
    # imported here: the engine imports the checks, and the sanitizer check imports this module
    from kernelaudit.engine.measure import reference_kernels
    from kernelaudit.inputs.materialize import materialize

    names: dict[str, None] = {}
    for case in cases:
        try:
            listed = reference_kernels(problem, case, materialize(problem, case), device)
        except Exception:
            continue  # the numerics check reports a reference that fails
        names.update(dict.fromkeys(k.name for k in listed.kernels))
    return tuple(names)
