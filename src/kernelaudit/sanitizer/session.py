"""One audit's sanitizer runs: the child once without the sanitizer (to time it and, where
racecheck may run, to list the candidate's kernels) and under each of the profile's tools, side
by side within its budget, and the reference's kernels on the same cases, listed in the
auditor's own process."""

from __future__ import annotations

import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kernelaudit.errors import UsageError
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import input_bytes
from kernelaudit.problem.spec import Problem
from kernelaudit.profiles import Profile
from kernelaudit.runner.auditor.limits import host_share
from kernelaudit.runner.auditor.results import Refused
from kernelaudit.runner.auditor.sandbox import cache_bound, job_bound
from kernelaudit.runner.candidate import CandidateRef
from kernelaudit.sanitizer.attribution import is_library_kernel, kernel_base
from kernelaudit.sanitizer.cases import Arguments, arguments, small_cases
from kernelaudit.sanitizer.child import (
    RESULT_BYTES,
    ChildResult,
    Launched,
    read_result,
    write_request,
)
from kernelaudit.sanitizer.report import Output, parse
from kernelaudit.sanitizer.run import (
    LOG_BYTES,
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

_STOP_POLL_S = 0.2

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
    wall_s: float = 0.0
    """Seconds from the first run's start to the last run's end (the runs overlap)."""
    plain_refused: str = ""
    """Why the plain run's result was not read ("" when it was, or there was none): not a
    file the child writes (`child.read_result`)."""

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


def prepare(problem: Problem, profile: Profile) -> tuple[list[Case], list[Arguments], list[str]]:
    """The profile's small cases, their arguments, and why any case had to be left out. Every
    run that goes at once (the plain one and one per tool) holds the inputs of every case on
    the host: a case whose inputs would take the runs past the host memory the candidate's
    processes may hold together is left out before its inputs are made (a mixture-of-experts
    layer's weights can take tens of GiB)."""
    host_bytes = profile.host_memory_bytes or host_share()
    runs = 1 + len(profile.sanitizer_tools)
    cases, built, dropped = [], [], []
    held = 0
    for case in small_cases(problem, profile.sanitizer_cases):
        needed = input_bytes(problem, case)
        if runs * (held + needed) > host_bytes:
            dropped.append(
                f"{case.label}: its inputs take {needed / 2**30:.2f} GiB, held by each of the "
                f"{runs} sanitizer runs at once, more than the {host_bytes / 2**30:.2f} GiB of "
                "host memory the candidate's processes may hold"
            )
            continue
        try:
            built.append(arguments(problem, case))
        except Exception as error:
            dropped.append(f"{case.label}: {type(error).__name__}: {error}")
            continue
        held += needed
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
    """Run the child plainly and under every tool the profile names, all at once (each run is
    mostly the start of Python, torch and CUDA under its tool, which do not share a process),
    for at most the budget (`budget_s`, else `Profile.sanitizer_budget_s`) of wall time;
    racecheck, as `Profile.sanitizer_racecheck` says, starts once the plain run has listed
    the candidate's kernels. `references`: the kernels the reference launches on the cases
    (`reference_kernels`), listed here when not given. Once `stop` is set, the runs in progress
    are killed and no other starts; when the plain run finds that the candidate cannot be
    imported, the tools' runs are stopped too."""
    budget = profile.sanitizer_budget_s if budget_s is None else budget_s
    if references is None:
        references = reference_kernels(problem, cases, device)
    env = environment(device)
    began = time.perf_counter()
    halt = threading.Event()
    if stop is not None:
        _follow(stop, halt)
    with (
        tempfile.TemporaryDirectory() as folder,
        ThreadPoolExecutor(len(profile.sanitizer_tools) + 2, "sanitizer-run") as pool,
    ):
        work = Path(folder)
        plain_request, sanitized_request = work / "plain.pt", work / "sanitized.pt"
        # the kernels are listed (by the profiler, seconds of its own) for racecheck's choice
        listing = profile.sanitizer_racecheck != "never"
        write_request(plain_request, candidate, built, device, CALLS, list_kernels=listing)
        write_request(sanitized_request, candidate, built, device, CALLS, list_kernels=False)

        def start(tool: str, kernels: tuple[str, ...]) -> Future[ToolRun] | str:
            left = budget - (time.perf_counter() - began)
            if halt.is_set():
                return "the audit ended first"
            if left < MIN_RUN_S:
                return f"{max(left, 0.0):.0f} s of the {budget:.0f} s budget left"
            log = work / f"{tool}.log"
            child = child_command(sanitized_request, work / f"{tool}.json")
            command = sanitizer_command(executable, tool, log, left, kernels, child)

            def sanitized() -> ToolRun:
                done = confined_run(tool, command, left, log)
                return ToolRun(done, parse(done.log, tool) if done.log else None, kernels)

            return pool.submit(sanitized)

        # the work folder holds the requests (written already), and each run's log and result
        # at most: the plain run, the profile's tools and racecheck
        most_runs = len(profile.sanitizer_tools) + 2
        job = job_bound(work, most_runs * (LOG_BYTES + RESULT_BYTES))
        folders = (cache_bound(candidate.path), job)
        # the tool's own installation is read, the work folder written
        tool_home = Path(executable).resolve().parent.parent

        def confined_run(tool: str, command: list[str], limit_s: float, log: Path) -> Run:
            done = run(
                tool,
                command,
                env,
                limit_s,
                log,
                candidate.path,
                work,
                [tool_home],
                halt,
                profile.host_memory_bytes,
                folders,
            )
            if done.over_disk:
                halt.set()  # the runs beside it write to the same folders: they stop too
            return done

        limit = profile.timeout_s * PLAIN_LIMIT_FACTOR
        plain_running = pool.submit(
            confined_run,
            "plain",
            child_command(plain_request, work / "plain.json"),
            limit,
            work / "plain.log",
        )
        # the tools that need nothing from the plain run start beside it
        early = {tool: start(tool, ()) for tool in profile.sanitizer_tools}
        plain = plain_running.result()
        plain_refused = ""
        try:
            plain_result = read_result(work / "plain.json")
        except Refused as error:
            plain_result, plain_refused = None, error.why
        unimportable = plain_result is not None and plain_result.error
        if unimportable:
            halt.set()  # the tools' runs cannot import it either
        runs: list[tuple[str, Future[ToolRun] | str]] = []
        for tool, kernels, why_not in planned_tools(profile, plain_result, references):
            if unimportable:
                runs.append((tool, "the candidate could not be imported"))
            elif tool in early:
                runs.append((tool, early[tool]))
            else:
                runs.append((tool, why_not or start(tool, kernels)))
        tools: list[ToolRun] = []
        skipped: list[tuple[str, str]] = []
        for tool, outcome in runs:
            if isinstance(outcome, str):
                skipped.append((tool, outcome))
            else:
                tools.append(outcome.result())
    halt.set()  # ends the thread that follows `stop`
    return Session(
        cases=tuple(f"{c.label}: {c.describe()}" for c in cases),
        plain=plain,
        plain_result=plain_result,
        tools=tuple(tools),
        skipped=tuple(skipped),
        reference_kernels=references,
        budget_s=budget,
        wall_s=time.perf_counter() - began,
        plain_refused=plain_refused,
    )


def _follow(stop: threading.Event, halt: threading.Event) -> None:
    """Set `halt` once `stop` is set (or `halt` is set by its owner), from a daemon thread."""

    def follow() -> None:
        while not halt.is_set():
            if stop.wait(_STOP_POLL_S):
                halt.set()

    threading.Thread(target=follow, name="sanitizer-stop", daemon=True).start()


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
