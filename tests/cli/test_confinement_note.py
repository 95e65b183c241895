"""What the terminal says about how candidates were confined and observed."""

from __future__ import annotations

from rich.console import Console

from kernelaudit.findings import AuditReport
from kernelaudit.report.caveats import isolated
from kernelaudit.runner.auditor.sandbox import NESTED_ALLOWED
from kernelaudit.runner.boundary.lent import OBSERVED_BY_THE_WORKER


def _report(isolation: str) -> AuditReport:
    return AuditReport(
        problem="p",
        problem_path="p.py",
        candidate="c",
        candidate_path="c.py",
        candidate_function="f",
        profile="quick",
        device="cuda",
        verdict="PASS",
        findings=(),
        records=(),
        seconds=1.0,
        isolation=isolation,
    )


def _said(isolation: str, strict: bool = False) -> tuple[bool, str]:
    console = Console(record=True, width=200)
    allowed = isolated([_report(isolation)], strict, console)
    return allowed, console.export_text()


def test_device_memory_observed_by_the_worker_alone_is_said_with_why() -> None:
    confined = "bubblewrap: private file system, process ids, user and network"
    unlent = f"{confined}; {OBSERVED_BY_THE_WORKER} (cuda-bindings are not installed)"
    allowed, said = _said(unlent, strict=True)
    assert allowed  # the sandbox held: --strict does not refuse it
    assert OBSERVED_BY_THE_WORKER in said and "(cuda-bindings are not installed)" in said
    assert _said(confined) == (True, "")


def test_a_sandbox_that_allows_user_namespaces_of_the_candidates_own_is_said() -> None:
    loose = f"bubblewrap: private file system, process ids, user and network; {NESTED_ALLOWED}"
    allowed, said = _said(loose, strict=True)
    assert allowed  # the sandbox held otherwise: --strict does not refuse it
    assert "user namespaces of their own allowed" in said
    assert "is not held to its memory limit" in " ".join(said.split())
