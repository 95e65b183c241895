"""What a check did in an audit: ran, ran in part, could not run here, or not applicable, and
why. A check says so through optional methods (`unavailable`, `unverified`, `not_run`,
`ran_in_part`, `not_applicable`); the report lists what a run could not verify from these."""

from __future__ import annotations

from kernelaudit.checks.base import PlanContext
from kernelaudit.profiles import Profile


def unavailable(check: object, device: str, profile: Profile) -> str:
    """Why `check` cannot do here what `profile` asks of it ("" when it can): a race, a leak
    or a library fallback shows only on a GPU, for one. A check that can be kept from running
    by the machine says so through an `unavailable(device, profile)` method; the report lists
    what was not verified (`AuditReport.unverified`)."""
    method = getattr(check, "unavailable", None)
    return str(method(device, profile)) if method is not None else ""


def unverified(check: object, device: str, profile: Profile) -> str:
    """What `check` leaves unverified here ("" when nothing): why it cannot run, or, for a
    check that runs only in part on this machine, through an `unverified(device, profile)`
    method, what it does not look at."""
    method = getattr(check, "unverified", None)
    if method is not None:
        return str(method(device, profile))
    return unavailable(check, device, profile)


def not_run(check: object, ctx: PlanContext) -> str:
    """Why `check`, able to run here, did not in this audit ("" when it did): the device had
    no room for its case, its run stopped before it saw anything. Said through a
    `not_run(ctx)` method, asked once the audit has ended."""
    method = getattr(check, "not_run", None)
    return str(method(ctx)) if method is not None else ""


def ran_in_part(check: object, ctx: PlanContext) -> str:
    """What `check`, having run, could not settle in this audit ("" when nothing): the host too
    busy for a measurement to tell, say. Said through a `ran_in_part(ctx)` method, asked once
    the audit has ended; listed with what this machine leaves unverified."""
    method = getattr(check, "ran_in_part", None)
    return str(method(ctx)) if method is not None else ""


def coverage(check: object, ctx: PlanContext) -> str:
    """What `check` did in an audit that has ended: "ran", "ran in part: why" (some of it
    cannot be seen here, or could not be settled in this audit: `ran_in_part`), "could not
    run here: why" (this machine, or this audit: `not_run`), or "not applicable: why" (the
    problem or the candidate gives it nothing to look at, through a `not_applicable(ctx)`
    method)."""
    why = unavailable(check, ctx.device, ctx.profile) or not_run(check, ctx)
    if why:
        return f"could not run here: {why}"
    why = unverified(check, ctx.device, ctx.profile) or ran_in_part(check, ctx)
    if why:
        return f"ran in part: {why}"
    method = getattr(check, "not_applicable", None)
    why = str(method(ctx)) if method is not None else ""
    return f"not applicable: {why}" if why else "ran"
