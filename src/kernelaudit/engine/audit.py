"""The audit: plan every check's probes, run them against the isolated candidate, judge each
observation with every check, group failures into findings, shrink them, and report."""

from __future__ import annotations

import contextlib
import platform
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import torch

import kernelaudit
from kernelaudit.checks import build_checks
from kernelaudit.checks.base import Check, PlanContext, Probe
from kernelaudit.checks.coverage import not_run, ran_in_part, unverified
from kernelaudit.checks.gradients import Gradients
from kernelaudit.checks.numerics import Numerics
from kernelaudit.device_copies import DEVICE_COPIES
from kernelaudit.engine.budget import SHRINK_SHARE, fit, unavailable_summary, untried_summary
from kernelaudit.engine.executor import Executor
from kernelaudit.engine.grouping import findings_of
from kernelaudit.engine.planning import plan_all, planning_said
from kernelaudit.engine.probing import (
    check_seconds,
    concluded,
    phase_done,
    probe_all,
    quiet_last,
    tell,
)
from kernelaudit.engine.progress import Progress, ProgressEvent
from kernelaudit.engine.shrink import ShrinkAllowance
from kernelaudit.engine.untried import Untried, covered, cut_short
from kernelaudit.errors import UsageError
from kernelaudit.findings import AuditReport, CaseRecord, Finding, unconfirmed_of
from kernelaudit.host_copies import release as release_page_locked
from kernelaudit.inputs import scheme
from kernelaudit.interpret.versions import interpreter_defects
from kernelaudit.oracle.resident import RESIDENT
from kernelaudit.problem.backward import autograd_signature, backward_problem
from kernelaudit.problem.spec import Problem
from kernelaudit.profiles import Profile, profile_named
from kernelaudit.runner.auditor.limits import Limits, default_limits
from kernelaudit.runner.auditor.preflight import refusal, refused_report
from kernelaudit.runner.auditor.process import Worker
from kernelaudit.runner.auditor.sandbox import isolation
from kernelaudit.runner.auditor.threads import held_to, thread_share
from kernelaudit.runner.boundary.lent import OBSERVED_BY_THE_WORKER, unavailable
from kernelaudit.runner.boundary.messages import CANDIDATE_MAINS
from kernelaudit.runner.candidate import CandidateRef, from_callable
from kernelaudit.timing.peaks import measure_roofline

_CPU_SM_TARGET = 132
"""Without a GPU, plan "fewer rows than SMs" sizes for an H100-class part (132 SMs)."""


def resolve_device(device: str | None) -> str:
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(
            f"device {device!r} was asked for but no CUDA device is visible; "
            "pass --device cpu or run on a machine with a GPU"
        )
    if device != "cpu" and not device.startswith("cuda"):
        raise UsageError(f"unknown device {device!r}; use auto, cpu or cuda[:N]")
    if device.startswith("cuda:"):
        index, count = device.removeprefix("cuda:"), torch.cuda.device_count()
        if not index.isdigit() or int(index) >= count:
            raise UsageError(
                f"device {device!r} does not exist: this machine has {count} CUDA device(s), "
                f"cuda:0 to cuda:{count - 1}"
            )
    return device


def audit(
    problem: Problem | str | Path,
    candidate: Callable[..., object] | str | CandidateRef,
    profile: str | Profile = "default",
    device: str | None = None,
    checks: list[str] | None = None,
    progress: Progress | None = None,
) -> AuditReport:
    """Audit one candidate against one problem and return the report.

    problem: a Problem, or the path of a problem in any format `kernelaudit.formats` reads.
    candidate: a module-level function, a CandidateRef, or a spec: "path/file.py::function",
        a SOL-ExecBench solution.json, a KernelBench file defining ModelNew.
    """
    _refuse_inside_a_candidate()
    # the readers import the runner and the checks: imported here, not at module level
    from kernelaudit.formats import read_candidate, read_problem

    if not isinstance(problem, Problem):
        problem = read_problem(problem)
    if isinstance(candidate, CandidateRef):
        ref = candidate
    elif isinstance(candidate, str):
        problem, ref = read_candidate(candidate, problem)
    else:
        ref = from_callable(candidate)
    chosen = profile if isinstance(profile, Profile) else profile_named(profile)
    return run_audit(problem, ref, chosen, resolve_device(device), build_checks(checks), progress)


def _refuse_inside_a_candidate() -> None:
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    if main is not None and main.name in CANDIDATE_MAINS:
        raise UsageError(
            "an audit was started while a candidate's file was being imported in its worker; "
            'put the code that starts the audit under `if __name__ == "__main__":`'
        )


def audit_in_turn(
    jobs: list[tuple[Problem, CandidateRef]],
    profile: Profile,
    device: str,
    checks: list[str] | None = None,
    progress: Progress | None = None,
) -> Iterator[AuditReport]:
    """Audit each (problem, candidate) in order, yielding each report as it is done. The next
    candidate's worker is launched while the current one is audited, so its start-up (importing
    torch, initialising the device, importing the candidate) is off the critical path. With
    several jobs, finding ids carry the job's number ("C2.F1") so they are unique in a file."""
    workers = [
        Worker(candidate, device, limits=limits_for(profile, device)) for _, candidate in jobs
    ]
    try:
        for index, (problem, candidate) in enumerate(jobs):
            if index + 1 < len(workers):
                workers[index + 1].launch()
            prefix = f"C{index + 1}." if len(jobs) > 1 else ""
            yield run_audit(
                problem,
                candidate,
                profile,
                device,
                build_checks(checks),
                progress,
                workers[index],
                prefix,
            )
    finally:
        for worker in workers:
            worker.close()


def run_audit(
    problem: Problem,
    candidate: CandidateRef,
    profile: Profile,
    device: str,
    checks: list[Check],
    progress: Progress | None = None,
    worker: Worker | None = None,
    finding_prefix: str = "",
) -> AuditReport:
    """Audit `candidate` on `problem`. `worker`, when given, is the candidate's worker launched
    ahead of time (see `Worker.launch`); the audit closes it. Findings are numbered
    `{finding_prefix}F1`, `F2`, ... The audit holds this process's thread pools to its share of
    the cores while it runs (`runner.auditor.threads`). A candidate whose source shows it cannot be
    called as the problem calls it fails at once, with the whole error
    (`runner.auditor.preflight`)."""
    _refuse_inside_a_candidate()
    why = refusal(problem, candidate)
    if why:
        if worker is not None:
            worker.close()
        return refused_report(problem, candidate, why, profile.name, device, finding_prefix)
    with held_to(thread_share(device)):
        try:
            return _audit(
                problem, candidate, profile, device, checks, progress, worker, finding_prefix
            )
        except BaseException:
            # an audit that ends early stops what its checks started in the background
            for check in checks:
                cancel = getattr(check, "cancel", None)
                if cancel is not None:
                    cancel()
            raise
        finally:
            RESIDENT.clear()  # the kept draws' device copies: the next audit's are its own
            DEVICE_COPIES.clear()
            release_page_locked()


def _audit(
    problem: Problem,
    candidate: CandidateRef,
    profile: Profile,
    device: str,
    checks: list[Check],
    progress: Progress | None,
    worker: Worker | None,
    finding_prefix: str,
) -> AuditReport:
    started = time.perf_counter()
    if device.startswith("cuda") and any(check.name == "timing" for check in checks):
        # the timing check's floor, measured on a quiet device (once per machine: it is kept
        # on disk), before probes and the checks' background runs share the device with it;
        # should it fail here, the timed probe measures it again and reports why
        with contextlib.suppress(RuntimeError):
            measure_roofline(device)
    ctx = PlanContext(problem, profile, device, sm_count(device), candidate)
    # the worker imports torch and the candidate while the probes are planned
    with worker or Worker(candidate, device, limits=limits_for(profile, device)) as worker:
        planned, plan_seconds = plan_all(checks, ctx)
        borrowed = not planned and not any(hasattr(check, "conclude") for check in checks)
        if borrowed:
            # checks that only watch (execution, bounds, mutation) judge the cases others run:
            # chosen alone, they watch the numerics sweep; a concluding check (tripwires,
            # training) runs its own experiment
            planned = Numerics().plan(ctx)
        fitted = fit(planned, problem, device, profile.budget_s)
        planning = time.perf_counter() - started
        said = planning_said(plan_seconds)
        tell(progress, ProgressEvent("phase", 0, len(fitted.probes), said, planning))
        executor = Executor(problem, worker, device)
        executor.measure_ahead(fitted.probes)
        quiet = [hook for check in checks if (hook := getattr(check, "quiet", None))]
        try:
            probing = probe_all(executor, checks, quiet_last(fitted.probes), progress, quiet)
        finally:
            executor.close()
        tell(progress, phase_done(probing, "probing", time.perf_counter() - started - planning))
        shrinking_began = time.perf_counter()
        by_name = {check.name: check for check in checks}
        allowance = ShrinkAllowance(SHRINK_SHARE * profile.budget_s)
        findings = findings_of(
            executor, by_name, probing.groups, probing.records, profile, allowance
        )
        shrinking = time.perf_counter() - shrinking_began
        tell(progress, phase_done(probing, "shrinking", shrinking))
        DEVICE_COPIES.clear()  # every case is judged: the device is the concluding checks'
        findings += concluded(checks, probing, progress)
    concluding = time.perf_counter() - shrinking_began - shrinking
    tell(progress, phase_done(probing, "concluding checks", concluding))
    records = probing.records
    backward = _backward_pass(ctx, checks, progress, allowance)
    if backward is not None:
        findings += backward.findings
        records += backward.records
    phases = {
        "planning": planning,
        **probing.seconds,
        "judging": probing.judging,
        "shrinking": shrinking,
        "concluding checks": concluding,
    }
    if backward is not None:
        phases["backward through autograd"] = backward.seconds
        tell(progress, phase_done(probing, "backward through autograd", backward.seconds))
    # the most specific diagnosis first: an unwritten output also shows as NaN in the numerics
    order = {check.name: i for i, check in enumerate(checks)}
    findings.sort(
        key=lambda f: (
            {"fail": 0, "warn": 1, "note": 2}[f.severity],
            order[f.check],
            -f.occurrences,
        )
    )
    findings = [replace(f, id=f"{finding_prefix}F{i}") for i, f in enumerate(findings, start=1)]
    verdict = "FAIL" if any(f.severity == "fail" for f in findings) else "PASS"
    untried = Untried(
        fitted.untried + (backward.untried if backward else ()),
        fitted.cut + (backward.cut if backward else ()),
        borrowed,
    )
    missing = tuple(
        (check.name, why)
        for check in checks
        if (
            why := unverified(check, device, profile)
            or not_run(check, ctx)
            or ran_in_part(check, ctx)
            or cut_short(check.name, untried, ctx)
        )
    )
    here = [check.name for check in checks if unverified(check, device, profile)]
    return AuditReport(
        problem=problem.name,
        problem_path=problem.source,
        candidate=candidate.label,
        candidate_path=candidate.path,
        candidate_function=candidate.function,
        profile=profile.name,
        device=device,
        verdict=verdict,
        findings=tuple(findings),
        records=tuple(records),
        seconds=time.perf_counter() - started,
        environment=environment(device),
        isolation=_confinement(device),
        unverified=missing,
        unconfirmed=unconfirmed_of(here, findings),
        coverage=covered(checks, ctx, untried),
        assumed=problem.assumed,
        phases=tuple((name, round(t, 3)) for name, t in phases.items()),
        interpretation=problem.notes,
        candidate_source=candidate.source,
        workload_errors=tuple(probing.workload_errors.items()),
        check_seconds=tuple(
            (name, round(seconds, 3)) for name, seconds in check_seconds(records, probing)
        ),
        judging_seconds=tuple((name, round(s, 3)) for name, s in probing.judged.items()),
        planning_seconds=tuple((name, round(s, 3)) for name, s in plan_seconds.items()),
        budget=(
            ("budget_s", profile.budget_s),
            ("planned_s", round(fitted.estimate_s, 3)),
            ("probes_planned", len(fitted.probes)),
            ("probes_untried", len(untried.untried)),
            ("probes_required_untried", len(untried.cut)),
            ("probes_sharing_a_run", probing.shared),
        ),
        untried=untried_summary(untried.untried)
        + unavailable_summary((*probing.unavailable, *(backward.unavailable if backward else ()))),
    )


def _backward_pass(
    ctx: PlanContext,
    checks: list[Check],
    progress: Progress | None,
    allowance: ShrinkAllowance,
) -> _Backward | None:
    """For an autograd-enabled candidate (`Contract(gradients=...)`): audit its backward, the
    candidate differentiated by autograd in its worker, against the reference differentiated
    in fp64, with the gradients check's cases. Its probes are all labelled "gradients", which
    is how a replay knows to differentiate again."""
    gradients = [check for check in checks if check.name == Gradients.name]
    problem, candidate = ctx.problem, ctx.candidate
    if not problem.contract.gradients or not gradients or candidate is None:
        return None
    began = time.perf_counter()
    derived = backward_problem(problem)
    differentiated = replace(candidate, autograd=autograd_signature(problem))
    derived_ctx = replace(ctx, problem=derived, candidate=differentiated)
    judges = [check for check in checks if check.name in _BACKWARD_JUDGES]
    limits = limits_for(ctx.profile, ctx.device)
    with Worker(differentiated, ctx.device, limits=limits) as worker:
        executor = Executor(derived, worker, ctx.device)
        fitted = fit(gradients[0].plan(derived_ctx), derived, ctx.device, ctx.profile.budget_s)
        probing = probe_all(executor, judges, list(fitted.probes), progress)
        by_name = {check.name: check for check in judges}
        findings = findings_of(
            executor, by_name, probing.groups, probing.records, ctx.profile, allowance
        )
    unavailable = tuple(probing.unavailable)
    return _Backward(
        findings,
        probing.records,
        time.perf_counter() - began,
        fitted.untried,
        unavailable,
        fitted.cut,
    )


_BACKWARD_JUDGES = ("execution", Gradients.name, "bounds", "mutation")
"""The checks that judge the backward pass's probes: its gradients, and what the candidate's
backward does besides (an exception, a write past a tensor, an input it overwrites)."""


@dataclass(frozen=True)
class _Backward:
    """What auditing an autograd-enabled candidate's backward found, and what it left out."""

    findings: list[Finding]
    records: list[CaseRecord]
    seconds: float
    untried: tuple[Probe, ...]
    """Probes the budget left out."""
    unavailable: tuple[tuple[Probe, str], ...]
    """Probes whose case the problem cannot make inputs for."""
    cut: tuple[Probe, ...] = ()
    """Of the probes every audit runs, those the budget left out (also in `untried`)."""


def _confinement(device: str) -> str:
    """How the candidate's processes were confined (`sandbox.Isolation`), and on a GPU where
    the auditor cannot lend the worker device memory (`runner.boundary.lent`), that the calls'
    memory there was observed by the worker alone."""
    described = isolation().describe()
    if device.startswith("cuda"):
        why = unavailable(torch.device(device))
        if why:
            described += f"; {OBSERVED_BY_THE_WORKER} ({why})"
    return described


def limits_for(profile: Profile, device: str) -> Limits:
    """The worker's limits: the profile's, or the machine's defaults where it leaves them 0."""
    limits = default_limits(profile.timeout_s, device)
    return replace(
        limits,
        host_memory_bytes=profile.host_memory_bytes or limits.host_memory_bytes,
        gpu_memory_bytes=profile.gpu_memory_bytes or limits.gpu_memory_bytes,
    )


def sm_count(device: str) -> int:
    """The device's SM count (on a CPU, an H100's, so the same sizes are planned)."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_properties(torch.device(device)).multi_processor_count
    return _CPU_SM_TARGET


def environment(device: str) -> tuple[tuple[str, str], ...]:
    """Versions and hardware, so a report says where its numbers come from."""
    env = [
        ("kernelaudit", kernelaudit.__version__),
        (scheme.RECORDED_AS, scheme.SCHEME),
        ("python", platform.python_version()),
        ("torch", torch.__version__),
    ]
    try:
        import triton

        env.append(("triton", triton.__version__))
    except ImportError:
        pass
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        env.append(("gpu", props.name))
        env.append(("cuda", str(torch.version.cuda)))
    else:
        env.append(("cpu", platform.processor() or platform.machine()))
        env += [("triton interpreter", defect) for defect in interpreter_defects()]
    return tuple(env)
