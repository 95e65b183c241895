"""What an audit's plan left untried, said check by check: the optional cases the time budget
left out, and, past `budget.REQUIRED_MOST` budgets, some of the cases every audit runs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kernelaudit.checks.base import Check, PlanContext, Probe
from kernelaudit.checks.coverage import coverage
from kernelaudit.engine.budget import REQUIRED_MOST


@dataclass(frozen=True)
class Untried:
    """The probes an audit's plans (its forward's, and its backward's through autograd) left
    out, and whose they are."""

    untried: tuple[Probe, ...] = ()
    """Every probe left out: optional ones, and those in `cut`."""
    cut: tuple[Probe, ...] = ()
    """Of the probes every audit runs, those left out (`budget.FittedPlan.cut`)."""
    borrowed: bool = False
    """The probes were planned for checks that plan none of their own (the execution, bounds
    and mutation checks chosen alone watch the numerics sweep): what was cut is theirs."""

    def cut_from(self, check: str) -> int:
        """How many of the cases every audit runs that `check` would have judged were cut."""
        if self.borrowed:
            return len(self.cut)
        return sum(1 for probe in self.cut if probe.check == check)

    def optional_from(self, check: str) -> int:
        """How many of `check`'s optional cases were left out."""
        if self.borrowed:
            return len(self.untried) - len(self.cut)
        cut = Counter(probe.check for probe in self.cut)
        return Counter(probe.check for probe in self.untried)[check] - cut[check]


def cut_short(check: str, untried: Untried, ctx: PlanContext) -> str:
    """Why `check` is not verified where the budget left out some of the cases every audit
    runs ("" where it left none): the same words for every audit, so that a corpus's runs
    group by them (the count is in the check's coverage)."""
    if not untried.cut_from(check):
        return ""
    return (
        "ran in part: the time budget left some of the cases every audit runs untried, their "
        f"estimate being past {REQUIRED_MOST:g} budgets ({_more(ctx)} runs more)"
    )


def covered(
    checks: Sequence[Check], ctx: PlanContext, untried: Untried
) -> tuple[tuple[str, str], ...]:
    """What each check did (`checks.coverage.coverage`); a check that ran while the time budget
    left some of its cases untried ran in part, and says how many: of the cases every audit
    runs, and of its optional ones."""
    said = []
    for check in checks:
        name = check.name
        what = coverage(check, ctx)
        cut, optional = untried.cut_from(name), untried.optional_from(name)
        if what == "ran" and cut:
            also = f" and {_cases(optional, 'optional case')}" if optional else ""
            what = (
                f"ran in part: the time budget left {cut} of the cases every audit runs{also} "
                f"untried, their estimate being past {REQUIRED_MOST:g} budgets ({_more(ctx)} "
                "runs more)"
            )
        elif what == "ran" and optional:
            what = (
                f"ran in part: the time budget left {_cases(optional, 'optional case')} "
                "untried (--budget SECONDS gives it more)"
            )
        said.append((name, what))
    return tuple(said)


def _cases(count: int, what: str) -> str:
    return f"{count} {what}{'s' * (count != 1)}"


def _more(ctx: PlanContext) -> str:
    """What runs more of an audit's cases: a larger budget, or the thorough profile's."""
    if ctx.profile.name == "thorough":
        return "--budget SECONDS"
    return "--budget SECONDS or --profile thorough"
