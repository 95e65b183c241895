"""Findings: the failures of one check and key grouped into one finding, its worst case shrunk,
with the variants of values and layouts that fail and those that pass."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from kernelaudit.checks.base import Check, Failure, Probe
from kernelaudit.engine.executor import Executor
from kernelaudit.engine.shrink import ShrinkAllowance, shrink
from kernelaudit.findings import CaseRecord, Finding, cause_of
from kernelaudit.inputs.case import Case, dtype_name
from kernelaudit.problem.spec import Problem
from kernelaudit.profiles import Profile


def findings_of(
    executor: Executor,
    checks: Mapping[str, Check],
    groups: Mapping[tuple[str, str], list[tuple[Probe, Failure]]],
    records: list[CaseRecord],
    profile: Profile,
    allowance: ShrinkAllowance | None = None,
) -> list[Finding]:
    """A finding of each group of failures (by check name and key; `finding_of`). A failing
    finding that echoes another check's failing finding (`findings.cause_of`: the results of a
    timed repetition wrong the same way as the judged call's, say, told by its key) is not
    shrunk: the report shows it under that finding, which is shrunk in its place. Shrinking
    it ran its check's probe again at every simpler case: for a timing check's echo, the timed
    repetitions and the auditor's clock, 0.5 to 4 s a case on an H200, where a bundled
    example's `quick` shrinking came to 29 s of a 10 s budget."""
    failing: dict[str, str] = {}
    for (name, key), items in groups.items():
        if _worst(items)[1].severity == "fail":
            failing.setdefault(key, name)
    return [
        finding_of(
            executor,
            checks[name],
            key,
            items,
            records,
            profile,
            allowance,
            echoes=cause_of(key, name, failing),
        )
        for (name, key), items in groups.items()
    ]


def _worst(items: list[tuple[Probe, Failure]]) -> tuple[Probe, Failure]:
    return max(items, key=lambda item: item[1].score)


def finding_of(
    executor: Executor,
    check: Check,
    key: str,
    items: list[tuple[Probe, Failure]],
    records: list[CaseRecord],
    profile: Profile,
    allowance: ShrinkAllowance | None = None,
    echoes: tuple[str, str] | None = None,
) -> Finding:
    """The finding of `check`'s failures `items` with `key`, its worst case shrunk within the
    profile's reruns and `allowance` (the audit's estimated seconds for shrinking), unless it
    `echoes` another check's failing finding (that finding's key, and what this one says of
    it: `findings.cause_of`)."""
    worst = _worst(items)
    probe, failure = worst
    steps: tuple[str, ...] = ()
    cut = False
    shrinkable = echoes is None and failure.severity == "fail" and failure.shrinks
    if shrinkable and not key.startswith(("timeout", "memory")):
        shrunk = shrink(executor, check, probe, failure, profile.shrink_budget, allowance)
        probe, failure, steps, cut = shrunk.probe, shrunk.failure, shrunk.steps, shrunk.cut
    same_check = [r for r in records if r.check == items[0][0].check]
    evidence = (
        *failure.evidence,
        ("cases", _by_variant(executor.problem, items, same_check, failure.severity)),
        ("other failing cases", _others(executor.problem, items, (probe, worst[0]))),
    )
    if probe.case != worst[0].case:
        # the shrunk case is the simplest that fails; the one it was shrunk from is the worst
        evidence = (("worst case", _row(executor.problem, *worst)), *evidence)
    if cut:
        evidence += (("shrinking", _CUT),)
    if echoes is not None and failure.severity == "fail":
        evidence += (("shrinking", _ECHO.format(key=echoes[0], said=echoes[1])),)
    return Finding(
        id="",
        check=check.name,
        key=key,
        severity=failure.severity,
        title=failure.title,
        evidence=evidence,
        probe=probe,
        original=worst[0].case,
        occurrences=len(items),
        probes=len(same_check),
        shrink_steps=steps,
    )


_CUT = (
    "stopped before the simplest case: the audit's time budget for shrinking was spent, and a "
    "simpler case may still fail the same way"
)

_ECHO = (
    "not shrunk: another check's failing finding {key!r} is its cause ({said}), and is shrunk "
    "in its place"
)

_OTHERS_SHOWN = 8
_HEADLINE_SKIPPED = ("result", "reason", "metrics", "message")
_KEPT_WHOLE = ("error by id count",)
"""Evidence each failing case keeps beyond its headline: every row's error by its id's count
(a case with one id, where shrinking often ends, has none)."""


def _others(
    problem: Problem, items: list[tuple[Probe, Failure]], shown: tuple[Probe, ...]
) -> list[dict[str, object]]:
    """The worst few other failing cases (than those `shown`: the shrunk case and the worst),
    each with its title and leading evidence: the one finding shows how the failure looks
    under each input that exposes it."""
    others = sorted((i for i in items if i[0] not in shown), key=lambda item: -item[1].score)
    return [_row(problem, probe, failure) for probe, failure in others[:_OTHERS_SHOWN]]


def _row(problem: Problem, probe: Probe, failure: Failure) -> dict[str, object]:
    """A failing case in a line: its variant, its title and its leading evidence."""
    row: dict[str, object] = {"case": _variant(problem, probe.case), "title": failure.title}
    headline = [(k, v) for k, v in failure.evidence if k not in _HEADLINE_SKIPPED]
    row.update(headline[:3])
    row.update((k, v) for k, v in failure.evidence if k in _KEPT_WHOLE)
    return row


def _variant(problem: Problem, case: Case) -> str:
    """A case's values, layouts, shape label and floating dtypes, e.g.
    "ids~zipf @ workload 0 [float16]"."""
    values = ", ".join(f"{name}~{dist}" for name, dist in case.values) or "default values"
    layouts = ", ".join(f"{name}:{layout}" for name, layout in case.layouts)
    label = case.label.removesuffix(" (shrunk)")
    config = problem.dtype_configs()[case.dtype_config]
    dtypes = "/".join(sorted({dtype_name(d) for d in config.values() if d.is_floating_point}))
    where = f"{values}; {layouts}" if layouts else values
    return f"{where} @ {label}" + (f" [{dtypes}]" if dtypes else "")


_VERBS = {"fail": "failed", "warn": "warned on", "note": "noted on"}


def _by_variant(
    problem: Problem,
    items: list[tuple[Probe, Failure]],
    records: list[CaseRecord],
    severity: str,
) -> dict[str, str]:
    """Failing (or, for a warning or a note, flagged) / total cases per value-and-layout
    variant: shows which inputs expose the bug and which hide it. A flagged case that was never
    judged (a workload left untried) counts among the total too."""
    failed = Counter(_variant(problem, p.case) for p, _ in items)
    total = Counter(_variant(problem, r.case) for r in records)
    for variant, count in failed.items():
        total[variant] = max(total[variant], count)
    verb = _VERBS.get(severity, "failed")
    return {
        variant: f"{verb} {failed.get(variant, 0)} of {count}"
        for variant, count in sorted(total.items(), key=lambda kv: -failed.get(kv[0], 0))
    }
