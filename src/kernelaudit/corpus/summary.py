"""The corpus summary, read back from the store (earlier runs included): verdicts, the checks
that fail candidates, and how each problem's candidates fared."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelaudit.corpus.jobs import PROBLEM_FILES
from kernelaudit.corpus.store import StoredResult, UntrustedRow

OUTCOMES = ("PASS", "FAIL", "error", "timeout", "crash", "unrunnable", "tampered")
"""A job's outcome: its verdict where it was audited, else its status."""
_ERRORS_SHOWN = 10
_FAILING_SHOWN = 30
_STYLES = {
    "PASS": "bold green",
    "FAIL": "bold red",
    "unrunnable": "bold magenta",
    "tampered": "bold red",
}


@dataclass(frozen=True)
class CorpusSummary:
    outcomes: tuple[tuple[str, int], ...]
    """How many jobs had each of `OUTCOMES`."""
    failing_checks: tuple[tuple[str, int], ...]
    """For each check, how many candidates it failed, most first."""
    problems: tuple[tuple[str, tuple[int, ...]], ...]
    """For each problem: how many of its jobs had each of `OUTCOMES`."""
    errors: tuple[tuple[str, str], ...]
    """A few jobs that were not audited: (problem / candidate (outcome), the message's first
    line)."""
    total: int
    untrusted: tuple[tuple[str, str], ...] = ()
    """A few stored results whose seal does not hold, left out of everything above: (key[:12]
    problem / candidate, why)."""
    untrusted_total: int = 0
    failing: tuple[tuple[str, str, str], ...] = ()
    """A few candidates that failed: (problem / candidate, their failing checks, the name
    their reports have in the reports folder, key[:12])."""

    @property
    def all_passed(self) -> bool:
        return dict(self.outcomes)["PASS"] == self.total


def outcome(result: StoredResult) -> str:
    """One of `OUTCOMES`."""
    return (result.verdict or "error") if result.status == "done" else result.status


def problem_label(path: str) -> str:
    """A problem's short name: its folder's for a folder or a problem.py / definition.json,
    else the file's stem."""
    where = Path(path)
    return where.parent.name if where.name in PROBLEM_FILES else where.stem or where.name


def candidate_label(spec: str) -> str:
    file, sep, function = spec.rpartition("::")
    return f"{Path(file).name}::{function}" if sep else Path(spec).name


def job_label(problem: str, candidate: str) -> str:
    """A job's short name: problem / candidate."""
    return f"{problem_label(problem)} / {candidate_label(candidate)}"


def untrusted_label(row: UntrustedRow) -> str:
    """A stored result that is not trusted, named by its job's key (as its reports are) and
    its job's short name."""
    return f"{row.key[:12]} {job_label(row.problem, row.candidate)}"


def summarise(results: list[StoredResult], untrusted: Sequence[UntrustedRow] = ()) -> CorpusSummary:
    """The summary of the trusted `results`, with the `untrusted` rows listed apart."""
    outcomes = Counter(outcome(r) for r in results)
    failing = Counter(check for r in results if outcome(r) == "FAIL" for check in r.failing_checks)
    per_problem: dict[str, Counter[str]] = {}
    for result in results:
        per_problem.setdefault(problem_label(result.problem), Counter())[outcome(result)] += 1
    errors = [
        (f"{job_label(r.problem, r.candidate)} ({outcome(r)})", first_line(r.error))
        for r in results
        if r.status != "done"
    ]
    return CorpusSummary(
        outcomes=tuple((name, outcomes[name]) for name in OUTCOMES),
        failing_checks=tuple(sorted(failing.items(), key=lambda kv: (-kv[1], kv[0]))),
        problems=tuple(
            (name, tuple(c[o] for o in OUTCOMES)) for name, c in sorted(per_problem.items())
        ),
        errors=tuple(errors[:_ERRORS_SHOWN]),
        total=len(results),
        untrusted=tuple((untrusted_label(r), r.reason) for r in untrusted[:_ERRORS_SHOWN]),
        untrusted_total=len(untrusted),
        failing=tuple(
            (job_label(r.problem, r.candidate), ", ".join(r.failing_checks) or "-", r.key[:12])
            for r in results
            if outcome(r) == "FAIL"
        )[:_FAILING_SHOWN],
    )


def print_summary(console: Console, summary: CorpusSummary) -> None:
    if summary.total:
        _print_outcomes(console, summary)
    else:
        console.print("no finished jobs in the store")
    if summary.untrusted:
        console.print(
            f"[bold red]not trusted[/]: {summary.untrusted_total} stored result(s) whose seal "
            "does not hold, counted as not audited (a run over their jobs audits them again):"
        )
        for where, why in summary.untrusted:
            console.print(f"  {escape(where)}: {escape(why)}", highlight=False)
        if summary.untrusted_total > len(summary.untrusted):
            console.print(f"  ... and {summary.untrusted_total - len(summary.untrusted)} more")


def _print_outcomes(console: Console, summary: CorpusSummary) -> None:
    verdicts = Table(title="corpus verdicts", title_justify="left")
    verdicts.add_column("verdict")
    verdicts.add_column("candidates", justify="right")
    # PASS and FAIL always; the other outcomes where some job had them
    shown = [i for i, (_, count) in enumerate(summary.outcomes) if count or i < 2]
    for i in shown:
        name, count = summary.outcomes[i]
        verdicts.add_row(styled(name), str(count))
    verdicts.add_row("total", str(summary.total))
    console.print(verdicts)
    if summary.failing_checks:
        checks = Table(title="failing candidates by check", title_justify="left")
        checks.add_column("check")
        checks.add_column("candidates failed", justify="right")
        for name, count in summary.failing_checks:
            checks.add_row(escape(name), str(count))
        console.print(checks)
    problems = Table(title="by problem", title_justify="left")
    problems.add_column("problem")
    for i in shown:
        problems.add_column(OUTCOMES[i], justify="right")
    for name, counts in summary.problems:
        problems.add_row(escape(name), *(str(counts[i]) for i in shown))
    console.print(problems)
    if summary.failing:
        console.print("[bold]failing candidates[/] (reports named by the job's key):")
        for where, checks, key in summary.failing:
            console.print(f"  {escape(where)}: {escape(checks)} ({key})", highlight=False)
        more = dict(summary.outcomes)["FAIL"] - len(summary.failing)
        if more > 0:
            console.print(f"  ... and {more} more (the reports folder's index.html lists all)")
    if summary.errors:
        console.print("[bold]not audited[/] (the store holds each one's full message):")
        for where, message in summary.errors:
            console.print(f"  {escape(where)}: {escape(message)}", highlight=False)
        hidden = summary.total - dict(summary.outcomes)["PASS"] - dict(summary.outcomes)["FAIL"]
        hidden -= len(summary.errors)
        if hidden > 0:
            console.print(f"  ... and {hidden} more")


def first_line(text: str | None) -> str:
    """An error message's first line, for a one-line listing."""
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else "-"


def styled(outcome_name: str, width: int = 0) -> str:
    """An outcome in console markup, padded to `width`."""
    style = _STYLES.get(outcome_name, "bold yellow")
    return f"[{style}]{outcome_name:{width}}[/]"
