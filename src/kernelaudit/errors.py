"""Errors a user can act on. The command line prints them and exits with code 2."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: a malformed problem, a missing candidate, an unknown option."""


class ProblemError(UsageError):
    """A problem declaration that cannot be used, with the file, the field and the fix."""

    def __init__(self, file: str, field: str, message: str, fix: str, line: int | None = None):
        self.file = file
        self.field = field
        self.message = message
        self.fix = fix
        self.line = line
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {field}: {message}\n  fix: {fix}")


class CaseUnavailable(Exception):
    """The problem cannot make inputs for a case (its inputs are recorded, say, only at the
    sizes of its workloads), or its reference cannot run at sizes no workload has: the case is
    left out of the audit and reported as untried, which is no fault of the candidate's nor of
    the problem's. `reason` is the few words the report's untried list gives."""

    def __init__(self, message: str, reason: str = "no inputs at these sizes") -> None:
        super().__init__(message)
        self.reason = reason
