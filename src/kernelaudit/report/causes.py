"""One finding per root cause: failures other checks see only because the candidate's results
are wrong, folded under the finding that says so.

Some checks judge the candidate's results again in a setting of their own: the timing check the
results of its last timed repetition (`timed-output:KEY`) and of the call its auditor's clock
timed (`clock-output:KEY`), the batch-invariance check a row computed alone (`alone-KEY`); and
the unwatched run reads the precision flags again in a plain process (`unwatched-state:NAME`,
the global-state check's `import:NAME` or `call:NAME`).
Where the same results are wrong the same way in the judged call (another check's failing
finding with key KEY), those findings are its symptoms, not a second bug: a wrong timed result
there is not a candidate behaving differently while it is timed. They stay in the report, with
the verdict they gave; a reader sees them under their cause.
"""

from __future__ import annotations

from kernelaudit.findings import AuditReport, Finding

ECHOES = {
    "timed-output:": ("its timed repetitions' results are wrong the same way", ("",)),
    "clock-output:": ("the calls timed on the auditor's clock are wrong the same way", ("",)),
    "alone-": ("its rows computed alone are wrong the same way", ("",)),
    "unwatched-state:": ("a plain process shows the same change", ("import:", "call:")),
}
"""Key prefixes of findings that judge the results (or the state) again, what such a finding
says of its cause, and the prefixes its cause's key may have in place of its own."""


def follow_ons(report: AuditReport) -> dict[str, tuple[Finding, str]]:
    """For each failing finding that echoes another's failure, the id it folds under: its
    cause, and what it adds."""
    causes: dict[str, Finding] = {}
    for finding in report.failures:
        causes.setdefault(finding.key, finding)
    folded: dict[str, tuple[Finding, str]] = {}
    for finding in report.failures:
        for prefix, (said, instead) in ECHOES.items():
            if not finding.key.startswith(prefix):
                continue
            rest = finding.key.removeprefix(prefix)
            cause = next((causes[k + rest] for k in instead if k + rest in causes), None)
            if cause is not None and cause.check != finding.check:
                folded[finding.id] = (cause, said)
    return folded
