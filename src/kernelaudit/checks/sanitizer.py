"""The sanitizer check: the candidate run under NVIDIA compute-sanitizer on one or two small
cases, with torch's caching allocator off and padding after every allocation, so an access one
element past a buffer is seen. Errors in the candidate's own kernels fail: out-of-bounds and
misaligned accesses (memcheck), reads of uninitialised memory (initcheck), barrier misuse
(synccheck), shared-memory races (racecheck; its warnings warn). Reports inside library kernels
(cuBLAS, cuDNN, torch's own, NCCL) are counted in one note and blamed on no one. What the runs
cost is a note too. Without a CUDA device or without compute-sanitizer, one note says so."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import ClassVar

import torch

from kernelaudit.checks.base import (
    NEEDS_CUDA,
    ConcludingOnly,
    Failure,
    PlanContext,
    Probe,
)
from kernelaudit.checks.sanitizer_findings import judged, note
from kernelaudit.errors import UsageError
from kernelaudit.inputs.case import Case
from kernelaudit.profiles import Profile
from kernelaudit.sanitizer.cases import Arguments
from kernelaudit.sanitizer.locate import locate
from kernelaudit.sanitizer.session import (
    Session,
    prepare,
    reference_kernels,
    run_session,
)


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
            return [note("could-not-run", f"the sanitizer check could not run: {self._not_run}")]
        unimported = session.plain_result is not None and session.plain_result.error
        if unimported and not session.tools:
            # the audit's own runs imported it: what the sanitizer's runs say of themselves
            # (the candidate's process writes their result) leaves this check unverified
            self._not_run = f"the candidate could not be imported in its runs: {unimported}"
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
            notes=(note("no-case", f"the sanitizer check found no case to run: {reason}"),)
        )
    return _Prepared(str(located.path), cases, built, tuple(dropped))


def unavailable(device: str) -> str:
    """Why compute-sanitizer cannot run on `device` ("" when it can, compute-sanitizer found)."""
    if not device.startswith("cuda"):
        return NEEDS_CUDA
    if torch.version.cuda is None:
        return "needs a CUDA build of torch (this one is not)"
    return ""
