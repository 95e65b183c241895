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
