"""What a run did not guarantee, said once at the end of a command: checks that could not run
on this machine, candidates that ran without their sandbox, or whose calls' device memory the
worker alone observed. `--strict` turns the first two into exit code 1. And what a CPU audit
measures but cannot mean: its timing note (`cpu_timing`)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from kernelaudit.findings import AuditReport, Finding
from kernelaudit.runner.auditor.sandbox import NESTED_ALLOWED
from kernelaudit.runner.boundary.lent import OBSERVED_BY_THE_WORKER

CPU_TIMINGS = ("timing", "times")
"""The check and key of a candidate's timing note."""


def cpu_timing(report: AuditReport, finding: Finding) -> bool:
    """Whether `finding` is a CPU audit's timing note: on a CPU (Triton through its
    interpreter) the times say nothing of the speed on a GPU, so the terminal leaves the note
    to the reports, saying so once, and the HTML report lists the times without plotting them."""
    return (
        report.device == "cpu"
        and finding.severity == "note"
        and (finding.check, finding.key) == CPU_TIMINGS
    )


def covered(reports: list[AuditReport], strict: bool, console: Console) -> bool:
    """Say which chosen checks could not run here, or ran and could not settle what they
    measure (`checks.coverage.ran_in_part`) or judge every case every audit runs (the time
    budget's doing, `engine.untried.cut_short`); False when `--strict` forbids it."""
    reasons: dict[str, list[str]] = {}
    for report in reports:
        for name, why in report.unverified:
            named = reasons.setdefault(why, [])
            if name not in named:
                named.append(name)
    if not reasons:
        return True
    said = "; ".join(f"{', '.join(names)} ({why})" for why, names in reasons.items())
    console.print(f"[yellow]not verified on {escape(reports[0].device)}: {escape(said)}[/]")
    if strict:
        console.print(
            "[red]--strict: exiting 1 because some checks could not run, settle or run in full "
            "here[/]"
        )
        return False
    return True


def isolated(reports: list[AuditReport], strict: bool, console: Console) -> bool:
    """Say when candidates ran without their sandbox, in a sandbox that allows them user
    namespaces of their own, or with their calls' device memory observed by the worker alone;
    False when `--strict` forbids running without a sandbox."""
    if any(NESTED_ALLOWED in r.isolation for r in reports):
        console.print(
            f"[yellow]the sandbox here leaves candidates {escape(NESTED_ALLOWED)}; bubblewrap "
            "0.8 or later, not installed setuid, forbids them.[/]"
        )
    unlent = next((r for r in reports if OBSERVED_BY_THE_WORKER in r.isolation), None)
    if unlent is not None:
        why = unlent.isolation.split(OBSERVED_BY_THE_WORKER, 1)[1].strip(" ()")
        console.print(
            f"[yellow]{OBSERVED_BY_THE_WORKER} ({escape(why)}): a candidate that rebinds the "
            "worker's checks in its process can hide writes out of bounds and into its "
            "inputs there.[/]"
        )
    loose = next((r for r in reports if not r.confined), None)
    if loose is None:
        return True
    console.print(
        f"[yellow]candidates ran without a sandbox: {escape(loose.isolation)}. A hostile "
        "candidate could read or change what the audit reads and writes.[/]"
    )
    if strict:
        console.print("[red]--strict: exiting 1 because the sandbox could not run[/]")
        return False
    return True
