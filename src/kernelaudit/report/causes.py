"""One finding per root cause: failures other checks see only because the candidate's results
are wrong, folded under the finding that says so.

Two checks judge the candidate's results again in a setting of their own: the timing check the
results of its last timed repetition (`timed-output:KEY`), the batch-invariance check a row
computed alone (`alone-KEY`). Where the same results are wrong the same way in the judged call
(another check's failing finding with key KEY), those findings are its symptoms, not a second
bug: a wrong timed result there is not a candidate behaving differently while it is timed.
They stay in the report, with the verdict they gave; a reader sees them under their cause.
"""

from __future__ import annotations

from kernelaudit.findings import AuditReport, Finding

ECHOES = {
    "timed-output:": "its timed repetitions' results are wrong the same way",
    "alone-": "its rows computed alone are wrong the same way",
}
"""Key prefixes of findings that judge the results again, and what such a finding says of its
cause."""


def follow_ons(report: AuditReport) -> dict[str, tuple[Finding, str]]:
    """For each failing finding that echoes another's failure, the id it folds under: its
    cause, and what it adds."""
    causes: dict[str, Finding] = {}
    for finding in report.failures:
        causes.setdefault(finding.key, finding)
    folded: dict[str, tuple[Finding, str]] = {}
    for finding in report.failures:
        for prefix, said in ECHOES.items():
            cause = causes.get(finding.key.removeprefix(prefix))
            if (
                finding.key.startswith(prefix)
                and cause is not None
                and cause.check != finding.check
            ):
                folded[finding.id] = (cause, said)
    return folded
