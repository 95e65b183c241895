"""Checking a kernel inside the real training or inference job, on its real inputs: a sample of
its calls judged against the reference by the oracle's rule (`guard`), failing calls kept as
records `kernelaudit repro` replays (`records`)."""

from kernelaudit.guarding.autograd import GuardedFunction, guard_autograd
from kernelaudit.guarding.guard import Guard, GuardFailure, GuardWarning, guard
from kernelaudit.guarding.records import Failure, Summary

__all__ = [
    "Failure",
    "Guard",
    "GuardFailure",
    "GuardWarning",
    "GuardedFunction",
    "Summary",
    "guard",
    "guard_autograd",
]
