"""Audits inside a project's own test suite.

    from kernelaudit.testing import assert_passes

    def test_fast_rmsnorm():
        assert_passes("kernels/rmsnorm_problem.py", "kernels/rmsnorm.py::fast_rmsnorm")

`assert_passes` audits a candidate and returns the report when it passes; when it fails, it
raises `AuditFailed` (an AssertionError, so pytest shows it as a failing test) whose message
is what the terminal would show of the audit: each failing finding's title, its numbers, its
smallest failing case and the command that replays it. The report is written as JSON either
way: to the folder `--kernelaudit-reports` names under pytest (`pytest_plugin`), else to a
temporary folder, so that command works.

Under pytest the command line's `--kernelaudit-profile`, `--kernelaudit-budget` and
`--kernelaudit-device` override what a test asks for, so one suite runs quick audits on every
push and thorough ones at night. Without a device, each pytest-xdist process takes its own GPU
in turn where there are several.

A PASS that left checks unverified on this machine (a race or a library fallback on a CPU, a
check that could not start) is said with an `Unverified` warning, which pytest lists in its
warnings summary; with `--kernelaudit-strict` (`Settings.strict`) it fails the test instead,
as `--strict` makes `kernelaudit check` exit 1.
"""

from __future__ import annotations

import io
import itertools
import os
import re
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernelaudit.findings import AuditReport

DEFAULT_PROFILE = "quick"


@dataclass(frozen=True)
class Settings:
    """What the command line of the test run set for every audit (None: not set)."""

    profile: str | None = None
    budget: float | None = None
    device: str | None = None
    reports: Path | None = None
    """The folder every audit's JSON report is written to."""
    strict: bool = False
    """Fail a passing audit that left checks unverified on this machine."""


_settings = Settings()
_numbered = itertools.count(1)
_scratch: Path | None = None


class Unverified(UserWarning):
    """An audit passed, but some of its checks could not verify what they look at here."""


class AuditFailed(AssertionError):
    """An audit under test did not pass; `report` is its report, `path` its JSON file."""

    def __init__(self, message: str, report: AuditReport, path: Path) -> None:
        super().__init__(message)
        self.report = report
        self.path = path


def configure(settings: Settings) -> None:
    """Set what the test run's command line asks of every audit (`pytest_plugin`)."""
    global _settings
    _settings = settings


def settings() -> Settings:
    return _settings


def assert_passes(
    problem: Any,
    candidate: Callable[..., object] | str | Any,
    profile: str | None = None,
    *,
    device: str | None = None,
    checks: list[str] | None = None,
    budget: float | None = None,
) -> AuditReport:
    """Audit `candidate` against `problem` and return the report; raise `AuditFailed` with a
    summary of its failing findings when its verdict is FAIL.

    problem: a Problem, or the path of a problem file in any format `kernelaudit check` reads.
    candidate: a module-level function, or a spec ("file.py::function", a solution.json).
    profile: quick (the default), default or thorough. checks: the checks to run (all by
        default). budget: seconds to plan the audit for, overriding the profile's. device:
        cpu, cuda or cuda:N (default: a GPU where there is one). The test run's command line
        overrides profile, budget and device (see the module's text).
    """
    # imported here: a test suite that only has the plugin loaded pays nothing for them
    from kernelaudit.engine.audit import audit
    from kernelaudit.findings import write_reports
    from kernelaudit.profiles import profile_with_budget

    chosen = profile_with_budget(
        _settings.profile or profile or DEFAULT_PROFILE,
        _settings.budget if _settings.budget is not None else budget,
    )
    where = _settings.device or device or _device_of_this_process()
    report = audit(problem, candidate, chosen, where, checks)
    path = _report_path(report)
    write_reports([report], path)
    if report.verdict != "PASS":
        raise AuditFailed(summary(report, path), report, path)
    if report.unverified:
        said = f"{report.candidate} passed on {report.problem}, but {_unverified(report)}"
        if _settings.strict:
            raise AuditFailed(
                f"kernelaudit: {said} (--kernelaudit-strict fails a pass that left checks "
                f"unverified; report: {path})",
                report,
                path,
            )
        warnings.warn(Unverified(f"kernelaudit: {said}"), stacklevel=2)
    return report


def summary(report: AuditReport, path: Path | None) -> str:
    """What the terminal says of a report's findings, as plain text."""
    from rich.console import Console

    from kernelaudit.report.terminal import print_findings

    text = io.StringIO()
    console = Console(file=text, width=100, color_system=None, highlight=False, soft_wrap=True)
    console.print(
        f"kernelaudit: {report.candidate} {report.verdict} on {report.problem} "
        f"({report.profile} profile, {report.device}, {len(report.records)} cases, "
        f"{report.seconds:.1f} s)"
    )
    print_findings(console, report, str(path) if path else None)
    if report.unverified:
        console.print(_unverified(report))
    return text.getvalue().rstrip()


def _unverified(report: AuditReport) -> str:
    said = "; ".join(f"{name} ({why})" for name, why in report.unverified)
    return f"not verified on {report.device}: {said}"


def with_options(**defaults: Any) -> Callable[..., AuditReport]:
    """`assert_passes` with `defaults` for its keyword arguments (a marker's)."""

    def bound(problem: Any, candidate: Any, **options: Any) -> AuditReport:
        return assert_passes(problem, candidate, **(defaults | options))

    return bound


def _device_of_this_process() -> str | None:
    """Under pytest-xdist with several GPUs, the GPU of this process's turn; else None (the
    audit's own choice)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    number = worker[2:] if worker.startswith("gw") else ""
    if not number.isdigit():
        return None
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return f"cuda:{int(number) % count}" if count > 1 else None


def _report_path(report: AuditReport) -> Path:
    """Where this audit's JSON report goes: named by the test that ran it, in the run's
    reports folder or a temporary one."""
    global _scratch
    folder = _settings.reports
    if folder is None:
        _scratch = _scratch or Path(tempfile.mkdtemp(prefix="kernelaudit-reports-"))
        folder = _scratch
    folder.mkdir(parents=True, exist_ok=True)
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    name = test.rsplit("/", 1)[-1] or f"{report.problem}-{report.candidate}"
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[:120] or "audit"
    return folder / f"{stem}-{worker + '-' if worker else ''}{next(_numbered)}.json"


__all__ = [
    "AuditFailed",
    "Settings",
    "Unverified",
    "assert_passes",
    "configure",
    "summary",
    "with_options",
]
