"""One finding per root cause: failures other checks see only because the candidate's results
are wrong, folded under the finding that says so.

Some checks judge the candidate's results (or the state) again in a setting of their own
(`findings.ECHOES`: a timed repetition, the call the auditor's clock timed, a row computed
alone, a plain process). Where the same results are wrong the same way in the judged call
(another check's failing finding with key KEY), those findings are its symptoms, not a second
bug: a wrong timed result there is not a candidate behaving differently while it is timed.
They stay in the report, with the verdict they gave; a reader sees them under their cause.
"""

from __future__ import annotations

from kernelaudit.findings import AuditReport, Finding, cause_of


def follow_ons(report: AuditReport) -> dict[str, tuple[Finding, str]]:
    """For each failing finding that echoes another's failure, the id it folds under: its
    cause, and what it adds."""
    causes: dict[str, Finding] = {}
    for finding in report.failures:
        causes.setdefault(finding.key, finding)
    failing = {key: finding.check for key, finding in causes.items()}
    folded: dict[str, tuple[Finding, str]] = {}
    for finding in report.failures:
        echo = cause_of(finding.key, finding.check, failing)
        if echo is not None:
            folded[finding.id] = (causes[echo[0]], echo[1])
    return folded
