"""Tripwires: the candidate's source (and the local modules it imports, and CUDA sources in
its strings) read before it runs, for constructs that game a benchmark: patched timers,
frame or `gc` walking, `ctypes`, caches keyed on addresses, module-level state, threads and
streams, environment sniffing, dynamic code, package installs. Each is a warning with its
line; it becomes a failure only when a runtime check that can confirm it failed too, or, for
a write into kernelaudit's own modules, on its own. A construct with honest uses in most
kernels that have it (atomics) is no warning: it fails where a runtime check confirms it, and is
a note where only a GPU could (on a CPU)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from kernelaudit.checks.base import ConcludingOnly, Failure, PlanContext, Probe
from kernelaudit.profiles import Profile
from kernelaudit.runner.candidate import CandidateRef
from kernelaudit.tripwires import RULES, Tripwire, scan


class Tripwires(ConcludingOnly):
    name: ClassVar[str] = "tripwires"
    summary: ClassVar[str] = (
        "the candidate's source holds no benchmark-gaming constructs (warnings, confirmed by "
        "runtime checks)"
    )

    def __init__(self) -> None:
        super().__init__()
        self.found: tuple[Tripwire, ...] = ()
        self.unread: tuple[tuple[str, str], ...] = ()
        self.on_gpu = False

    def plan(self, ctx: PlanContext) -> list[Probe]:
        self.on_gpu = ctx.device.startswith("cuda")
        if ctx.candidate is not None:
            scanned = scan(*_scanned(ctx.candidate))
            self.found, self.unread = scanned.tripwires, scanned.unread
        return []

    def unverified(self, device: str, profile: Profile) -> str:
        """The files the scan reached and could not read (nothing in them was checked), and on
        a CPU the constructs only a GPU run can confirm or rule out (a side stream)."""
        said = []
        if self.unread:
            files = "; ".join(f"{Path(path).name} ({why})" for path, why in self.unread)
            said.append(f"the static scan could not read {files}: nothing there was checked")
        unshown = [w for w in self.found if RULES[w.rule].gpu_only]
        if unshown and not device.startswith("cuda"):
            where = ", ".join(f"{w.rule} at {Path(w.path).name}:{w.line}" for w in unshown)
            said.append(f"{where}: only a run on a GPU can confirm or rule out")
        return "; ".join(said)

    def conclude(self, found: Sequence[tuple[str, Failure]]) -> list[Failure]:
        failing = {check for check, failure in found if failure.severity == "fail"}
        concluded = []
        for wire in self.found:
            confirmed = sorted(failing.intersection(wire.confirmed_by))
            rule = RULES[wire.rule]
            unshown = rule.gpu_only and not self.on_gpu
            if rule.quiet and not confirmed and not unshown:
                continue  # honest in most kernels that have it: not a warning of its own
            alone = rule.fails_alone
            where = f"{Path(wire.path).name}:{wire.line}"
            title = f"{wire.rule} at {where}: {wire.text}"
            if confirmed:
                title += f" (confirmed by the {', '.join(confirmed)} check)"
            elif alone:
                title += " (no kernel has a reason for it: a failure on its own)"
            elif rule.quiet:
                title += " (only a run on a GPU can confirm or rule out what it risks)"
            concluded.append(
                Failure(
                    key=f"{wire.rule}:{wire.path}:{wire.line}",
                    title=title,
                    evidence=(
                        ("rule", wire.rule),
                        ("file", wire.path),
                        ("line", wire.line),
                        ("source", wire.text),
                        ("why", wire.why),
                        ("confirmed by", confirmed),
                        ("checks that could confirm it", list(wire.confirmed_by)),
                    ),
                    severity="fail" if confirmed or alone else "note" if rule.quiet else "warn",
                )
            )
        return concluded


def _scanned(candidate: CandidateRef) -> tuple[str, str]:
    """The file and name whose code the scan reads: the user's own file where a format reader
    generated the module the worker imports (a KernelBench ModelNew behind its shim)."""
    if candidate.source.endswith(".py") and "::" in candidate.name:
        return candidate.source, candidate.name.rpartition("::")[2]
    return candidate.path, candidate.function
