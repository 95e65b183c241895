"""The sanitizer check: the candidate run under NVIDIA compute-sanitizer on one or two small
cases, with torch's caching allocator off and padding after every allocation, so an access one
element past a buffer is seen. Errors in the candidate's own kernels fail: out-of-bounds and
misaligned accesses (memcheck), reads of uninitialised memory (initcheck), barrier misuse
(synccheck), shared-memory races (racecheck; its warnings warn). Reports inside library kernels
(cuBLAS, cuDNN, torch's own, NCCL) are counted in one note and blamed on no one. What the runs
cost is a note too. Without a CUDA device or without compute-sanitizer, one note says so."""

from __future__ import annotations

import shlex
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch

from kernelaudit.checks.base import (
    NEEDS_CUDA,
    ConcludingOnly,
    Failure,
    PlanContext,
    Probe,
    Severity,
)
from kernelaudit.errors import UsageError
from kernelaudit.inputs.case import Case
from kernelaudit.profiles import Profile
from kernelaudit.sanitizer.attribution import attribute, kernel_base
from kernelaudit.sanitizer.cases import Arguments
from kernelaudit.sanitizer.locate import locate
from kernelaudit.sanitizer.report import Report
from kernelaudit.sanitizer.session import (
    Session,
    ToolRun,
    prepare,
    reference_kernels,
    run_session,
)

_SEVERITIES: dict[str, Severity] = {"error": "fail", "warning": "warn", "info": "note"}
"""A report's level (racecheck's; every other tool's reports are errors) as a severity."""

_SHOWN = 6
"""Kernels, reports or messages listed by name in one piece of evidence."""


class Sanitizer(ConcludingOnly):
    name: ClassVar[str] = "sanitizer"
    summary: ClassVar[str] = (
        "on a CUDA device, compute-sanitizer sees no out-of-bounds, misaligned or uninitialised "
        "access, barrier error or shared-memory race in the candidate's own kernels"
    )

    def __init__(self) -> None:
        super().__init__()
        self._began = 0.0
        self._prepared: _Prepared | None = None
        self._running: Future[Session] | None = None
        self._stop = threading.Event()
        self._ctx: PlanContext | None = None
        self._not_run = ""

    def not_run(self, ctx: PlanContext) -> str:
        """Why the runs checked nothing, once the audit has ended: they could not start."""
        return self._not_run

    def unavailable(self, device: str, profile: Profile) -> str:
        why = unavailable(device)
        located = locate() if not why else None
        if located is not None and not located.found:
            why = (
                f"needs compute-sanitizer, which was not found (searched: "
                f"{'; '.join(located.searched)}): install the CUDA toolkit, or put its bin/ on "
                "PATH or set CUDA_HOME"
            )
        return why

    @property
    def _references_later(self) -> bool:
        return self._ctx is not None and self._ctx.profile.sanitizer_racecheck == "never"

    def plan(self, ctx: PlanContext) -> list[Probe]:
        """Starts the sanitizer's runs in the background: they go on while the probes run and
        are collected in `conclude`; `quiet` waits for them before a probe that measures the
        device (times, kernels, memory), which they would disturb."""
        self._began = time.perf_counter()
        super().plan(ctx)
        self._not_run = ""
        self._prepared = _prepare(ctx)
        self._ctx = ctx
        prepared = self._prepared
        if prepared.cases and ctx.candidate is not None:
            # The reference's kernels are listed by the profiler in the auditor's own process,
            # so never while a probe's work is on the device. Only racecheck's choice of
            # kernels needs them before the runs end: without racecheck they are listed when
            # the runs are judged, and the runs start at once.
            references = (
                ()
                if self._references_later
                else reference_kernels(ctx.problem, prepared.cases, ctx.device)
            )
            background = ThreadPoolExecutor(1, "sanitizer")
            self._running = background.submit(
                run_session,
                ctx.problem,
                ctx.candidate,
                ctx.profile,
                ctx.device,
                prepared.executable,
                prepared.cases,
                prepared.built,
                ctx.profile.sanitizer_budget_s,
                references,
                self._stop,
            )
            background.shutdown(wait=False)  # the thread ends with its one run
        return []

    def quiet(self) -> None:
        """Wait until the sanitizer's runs are over (they share the device)."""
        if self._running is not None:
            wait([self._running])

    def cancel(self) -> None:
        """Stop the runs: the audit ended without them (an error, an interrupt)."""
        self._stop.set()

    def conclude(self, found: Sequence[tuple[str, Failure]]) -> list[Failure]:
        prepared, running = self._prepared, self._running
        self._running = None
        if prepared is None:
            return []
        if running is None:
            return list(prepared.notes)
        try:
            session = running.result()
        except UsageError:
            raise
        except Exception as error:
            self._not_run = f"its runs could not start: {type(error).__name__}: {error}"
            return [_note("could-not-run", f"the sanitizer check could not run: {self._not_run}")]
        if self._references_later and self._ctx is not None:
            listed = reference_kernels(self._ctx.problem, prepared.cases, self._ctx.device)
            session = replace(session, reference_kernels=listed)
        # the runs went on beside the probes: the rest of the audit is what they did not cover
        elapsed = time.perf_counter() - self._began
        rest = max(elapsed - session.wall_s, 0.0)
        return judged(session, rest, prepared.dropped)


@dataclass(frozen=True)
class _Prepared:
    """What the sanitizer's runs need, or the notes saying why there are none."""

    executable: str = ""
    cases: list[Case] = field(default_factory=list)
    built: list[Arguments] = field(default_factory=list)
    dropped: tuple[str, ...] = ()
    notes: tuple[Failure, ...] = ()


def _prepare(ctx: PlanContext) -> _Prepared:
    if ctx.candidate is None:
        return _Prepared()
    if unavailable(ctx.device):
        return _Prepared()  # the report's list of what was not verified says why
    located = locate()
    if not located.found:
        return _Prepared()  # as above
    cases, built, dropped = prepare(ctx.problem, ctx.profile)
    if not built:
        reason = "; ".join(dropped) or "the problem declares no workload"
        return _Prepared(
            notes=(_note("no-case", f"the sanitizer check found no case to run: {reason}"),)
        )
    return _Prepared(str(located.path), cases, built, tuple(dropped))


def unavailable(device: str) -> str:
    """Why compute-sanitizer cannot run on `device` ("" when it can, compute-sanitizer found)."""
    if not device.startswith("cuda"):
        return NEEDS_CUDA
    if torch.version.cuda is None:
        return "needs a CUDA build of torch (this one is not)"
    return ""


def judged(session: Session, audit_s: float, dropped: tuple[str, ...] = ()) -> list[Failure]:
    """The failures and notes of one session: the candidate's reports grouped by tool, kind,
    access and kernel; what kept a run from checking; library reports; the cost."""
    failures = _plain_notes(session)
    library: list[Report] = []
    outside: list[Report] = []
    for tool_run in session.tools:
        failures += _tool_notes(tool_run)
        if tool_run.output is None:
            continue
        split = attribute(tool_run.output.reports, session.reference_kernels)
        library += split.library
        outside += split.outside
        failures += _blamed(tool_run, split.candidate, session)
        output = tool_run.output
        if not output.reports and not output.problems and (output.errors or 0) > 0:
            failures.append(_unread(tool_run))
    if library or outside:
        failures.append(_library_note(library, outside))
    failures.append(_cost_note(session, audit_s, dropped))
    return failures


def _blamed(tool_run: ToolRun, reports: Sequence[Report], session: Session) -> list[Failure]:
    groups: dict[tuple[str, ...], list[Report]] = {}
    for report in reports:
        key = (
            report.kind,
            report.severity,
            report.space,
            report.access,
            kernel_base(report.kernel),
        )
        groups.setdefault(key, []).append(report)
    failures = []
    for (kind, severity, space, access, base), group in groups.items():
        first = group[0]
        evidence: list[tuple[str, Any]] = [
            ("tool", tool_run.run.tool),
            ("kernel", first.kernel),
            ("where", first.where),
            ("access", _access(first)),
            ("address", f"{first.address} {first.verdict}".strip()),
            ("thread", f"{first.thread} in block {first.block}" if first.thread else first.block),
            ("reports", len(group)),
        ]
        if tool_run.output is not None and tool_run.output.errors is not None:
            evidence.append(("errors counted by the tool", tool_run.output.errors))
        evidence += [
            ("cases run", list(session.cases)),
            ("first report", "\n".join(first.lines)),
            ("sanitizer command", shlex.join(tool_run.run.command)),
        ]
        failures.append(
            Failure(
                key=f"{tool_run.run.tool}:{kind}:{space}-{access}:{base}",
                title=_title(tool_run.run.tool, group, base),
                evidence=tuple((k, v) for k, v in evidence if v not in ("", None)),
                severity=_SEVERITIES.get(severity, "warn"),
                score=float(len(group)),
            )
        )
    return failures


def _title(tool: str, group: Sequence[Report], base: str) -> str:
    first = group[0]
    count = f"{len(group)} report{'' if len(group) == 1 else 's'}"
    space = f"{first.space} " if first.space else ""
    if first.kind == "invalid access":
        what = "invalid"
        if "out of bounds" in first.verdict:
            what = "out-of-bounds"
        elif "misaligned" in first.verdict:
            what = "misaligned"
        return (
            f"{tool}: {what} {space}{first.access} of {first.size} bytes in kernel {base} ({count})"
        )
    if first.kind == "uninitialized access":
        return (
            f"{tool}: kernel {base} reads uninitialised {space}memory ({first.size}-byte "
            f"{first.access}s, {count})"
        )
    if first.kind == "race":
        hazards = sum(r.hazards or 0 for r in group)
        return (
            f"{tool}: shared-memory race between {first.access.replace('/', ' and ')} accesses "
            f"in kernel {base} ({hazards} hazards, {count})"
        )
    if first.kind == "hazard":
        return (
            f"{tool}: potential {first.access} hazard on shared memory in kernel {base} ({count})"
        )
    return f"{tool}: {first.headline.rstrip('.')} in kernel {base} ({count})"


def _access(report: Report) -> str:
    if report.kind not in ("invalid access", "uninitialized access", "race", "hazard"):
        return ""
    size = f" of {report.size} bytes" if report.size is not None else ""
    return f"{report.space} {report.access}{size}".strip()


def _plain_notes(session: Session) -> list[Failure]:
    """What went wrong running the candidate without the sanitizer."""
    plain, result = session.plain, session.plain_result
    if result is None:
        how = (
            f"was stopped: {plain.over_memory}"
            if plain.over_memory
            else f"was stopped after {plain.seconds:.0f} s"
            if plain.timed_out
            else f"exited with code {plain.returncode} and wrote no result"
        )
        return [
            _note(
                "plain-run",
                f"the candidate's run without the sanitizer {how}; its kernels could not be listed",
                ("output", plain.output.strip()),
            )
        ]
    if result.error:
        return [_note("plain-run", result.error)]
    if result.failures:
        return [
            _note(
                "plain-run",
                f"{len(result.failures)} call(s) raised without the sanitizer, so the sanitizer "
                f"saw only the calls before them: {result.failures[0]}",
                ("calls that raised", list(result.failures)),
            )
        ]
    return []


def _tool_notes(tool_run: ToolRun) -> list[Failure]:
    """Why a run checked less than it should have: stopped, failed, cut short."""
    run, output = tool_run.run, tool_run.output
    tool = run.tool
    command = ("sanitizer command", shlex.join(run.command))
    if run.returncode is None:  # stopped: for memory, or at the budget's limit
        limit = f" at the budget's limit after {run.seconds:.0f} s"
        why = f": {run.over_memory}" if run.over_memory else limit
        return [
            _note(
                f"{tool}:host-memory" if run.over_memory else f"{tool}:stopped",
                f"compute-sanitizer {tool} was stopped{why}; what it reported until then is judged",
                ("output", run.output.strip()),
                command,
            )
        ]
    if output is None:
        return [
            _note(
                f"{tool}:no-report",
                f"compute-sanitizer {tool} wrote no report (exit code {run.returncode})",
                ("output", run.output.strip()),
                command,
            )
        ]
    if output.problems:
        return [
            _note(
                f"{tool}:tool-error",
                f"compute-sanitizer {tool} could not check the candidate: {output.problems[0]}",
                ("messages", list(output.problems)),
                ("output", run.output.strip()),
                command,
            )
        ]
    if not output.complete:
        return [
            _note(
                f"{tool}:cut-short",
                f"compute-sanitizer {tool}'s report ends without its summary line; what it "
                "reported until then is judged",
                ("output", run.output.strip()),
                command,
            )
        ]
    return []


def _unread(tool_run: ToolRun) -> Failure:
    output = tool_run.output
    assert output is not None
    return Failure(
        key=f"{tool_run.run.tool}:unread",
        title=f"compute-sanitizer {tool_run.run.tool} counted {output.errors} error(s) in a form "
        "kernelaudit could not read; see its log",
        evidence=(
            ("log", tool_run.run.log[-4000:]),
            ("sanitizer command", shlex.join(tool_run.run.command)),
        ),
        severity="warn",
    )


def _library_note(library: Sequence[Report], outside: Sequence[Report]) -> Failure:
    kernels = Counter(kernel_base(r.kernel) for r in library)
    parts = []
    if library:
        names = ", ".join(name for name, _ in kernels.most_common(3))
        parts.append(f"{len(library)} inside library kernels ({names})")
    if outside:
        parts.append(f"{len(outside)} outside any kernel")
    first = (library or outside)[0]
    return _note(
        "library-kernels",
        f"compute-sanitizer reports not blamed on the candidate: {' and '.join(parts)}",
        ("library kernels", dict(kernels.most_common(_SHOWN))),
        ("outside any kernel", [r.headline for r in outside[:_SHOWN]]),
        ("first report", "\n".join(first.lines)),
    )


def _cost_note(session: Session, audit_s: float, dropped: tuple[str, ...]) -> Failure:
    ran = [t.run.tool for t in session.tools]
    plain = session.plain_s
    if ran:
        per_run = session.sanitized_s / len(ran)
        ratio = f", {per_run / plain:.0f}x" if plain > 0 else ""
        spent = session.wall_s
        share = spent / (audit_s + spent) if audit_s + spent > 0 else 0.0
        title = (
            f"compute-sanitizer ran {', '.join(ran)} on {len(session.cases)} case(s) in "
            f"{spent:.1f} s side by side ({per_run:.1f} s a tool{ratio} the {plain:.1f} s of "
            f"the same run without it), {share:.0%} of the audit"
        )
    else:
        title = "compute-sanitizer ran no tool"
    if session.skipped:
        title += "; skipped " + ", ".join(f"{tool} ({why})" for tool, why in session.skipped)
    kernels = [
        f"{k.name} ({'?' if k.shared_bytes is None else k.shared_bytes} bytes of shared memory)"
        for k in session.candidate_kernels
    ]
    return _note(
        "cost",
        title,
        ("seconds per tool", {t.run.tool: round(t.run.seconds, 1) for t in session.tools}),
        ("kernels checked", {t.run.tool: list(t.kernels) for t in session.tools if t.kernels}),
        ("seconds without the sanitizer", round(plain, 1)),
        ("budget seconds", session.budget_s),
        ("audit seconds besides the sanitizer's", round(audit_s, 1)),
        ("skipped", dict(session.skipped)),
        ("cases run", list(session.cases)),
        ("cases left out", list(dropped)),
        ("candidate kernels", kernels[:_SHOWN]),
        (
            "why the kernels could not be listed",
            session.plain_result.listing_error if session.plain_result is not None else "",
        ),
        ("reference kernels", [kernel_base(n) for n in session.reference_kernels[:_SHOWN]]),
    )


def _note(key: str, title: str, *evidence: tuple[str, Any]) -> Failure:
    kept = tuple((k, v) for k, v in evidence if v not in ("", None, [], {}))
    return Failure(key=key, title=title, evidence=kept, severity="note")
