"""No real kernel: the device kernels a candidate launches, listed by the profiler, set against
those the reference launches on the same case. A candidate whose device time is all (or nearly
all) in kernels the reference launches too is a library or reference fallback: it ships
nothing of its own. A candidate that launches no kernel at all on a device computes on the host
or answers from a cache. Both fail unless the problem allows library calls (then a warning).

On a CPU there are no device kernels to list, but Triton's interpreter runs a Triton candidate's
kernels there: a candidate that can reach Triton kernels (its function names them, or functions
of its own that it calls do; failing that, its own module defines them) and launches none of
them in a call at the first workload computes that call with something else (torch, the host),
which fails the same way (`runner.worker.watch.InterpretedLaunches` counts them in the worker). The
calls judged are those of any probe on the timing probe's case (the first workload at default
values, first dtype configuration and plain layout): the timing probe's, or the numerics
sweep's when the check is chosen alone. A candidate whose format declares it Triton (a
SOL-ExecBench solution's `spec.languages`) with no Triton kernel within reach at all fails the
same way."""

from __future__ import annotations

from typing import ClassVar

from kernelaudit.checks.base import NEEDS_CUDA, Failure, Observation, PlanContext, Probe
from kernelaudit.checks.timing import timing_probe
from kernelaudit.profiles import Profile
from kernelaudit.timing.measure import format_seconds

FALLBACK_SHARE = 0.9
"""The share of its device time a candidate may spend in kernels the reference also launches.
A fused kernel of its own that also calls, say, one cuBLAS gemm stays below it."""


class Kernels:
    name: ClassVar[str] = "kernels"
    summary: ClassVar[str] = (
        "on a GPU, the candidate's time is in kernels of its own, not in the reference's or a "
        "library's"
    )

    def unverified(self, device: str, profile: Profile) -> str:
        if device.startswith("cuda"):
            return ""
        return (
            f"{NEEDS_CUDA} for the rest: on a CPU only whether a Triton candidate launches its "
            "kernels is seen"
        )

    def __init__(self) -> None:
        self._languages: tuple[str, ...] = ()

    def plan(self, ctx: PlanContext) -> list[Probe]:
        self._languages = ctx.candidate.languages if ctx.candidate is not None else ()
        # the timing check's probe: profiled once, judged by both
        return [timing_probe(ctx)] if ctx.device.startswith("cuda") else []

    def judge(self, observation: Observation) -> list[Failure]:
        if observation.result.error:
            return []
        interpreted = _launched_none(observation, "triton" in self._languages)
        if interpreted is not None:
            return [interpreted]
        reference = observation.measurements.get("reference kernels")
        if reference is None or reference.calls == 0:
            return []
        failures: list[Failure] = []
        for outcome in observation.result.calls:
            profile = outcome.kernels
            if profile is None or not profile.calls:
                continue
            severity = "warn" if observation.problem.contract.library_calls else "fail"
            evidence = (
                ("candidate kernels", profile.to_json()),
                ("reference kernels", reference.to_json()),
            )
            if profile.total_s <= 0:
                failures.append(
                    Failure(
                        key="no-kernels",
                        title="launched no device kernel in "
                        f"{profile.calls} profiled call{'s' if profile.calls != 1 else ''}: "
                        "the results come from the host or from a cache",
                        evidence=evidence,
                        severity="fail",
                        shrinks=False,  # the calls profiled at the workload, as a whole
                    )
                )
                continue
            theirs = {k.name for k in reference.kernels}
            shared = [k for k in profile.kernels if k.name in theirs]
            share = sum(k.seconds for k in shared) / profile.total_s
            if share >= FALLBACK_SHARE:
                names = ", ".join(_short(k.name) for k in shared[:3])
                failures.append(
                    Failure(
                        key="fallback",
                        title=f"{share:.0%} of the candidate's device time "
                        f"({format_seconds(profile.total_s)} per call) is in kernels the "
                        f"reference launches too ({names}): a library or reference fallback, "
                        "not a kernel of its own",
                        evidence=(*evidence, ("shared share of time", round(share, 4))),
                        severity=severity,
                        shrinks=False,  # the share of the workload's device time
                    )
                )
        return failures

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []


def _launched_none(observation: Observation, declared: bool) -> Failure | None:
    """A call that launched none of the Triton kernels within the candidate's reach, counted
    through Triton's interpreter (on a CPU), judged where the GPU's profile is: at the first
    workload's sizes, default values, first dtype configuration and plain layout, the timing
    probe's case (a kernel may hand a tiny boundary case, a strided one or a dtype it has no
    kernel for to torch). With `declared` (its format says it is written in Triton), a
    candidate with no Triton kernel within reach at all fails too."""
    if observation.device.startswith("cuda"):
        return None
    first = dict(observation.problem.workloads[0].sizes)
    steps = observation.probe.plan.sequence()
    for call, outcome in enumerate(observation.result.calls):
        case = (steps[call].case if call < len(steps) else None) or observation.probe.case
        if case.size_map() != first or case.layouts or case.values or case.dtype_config:
            continue
        if declared and outcome.interpreted_launches < 0:
            return Failure(
                key="no-triton-kernel",
                title="is declared a Triton solution (spec.languages) but has no Triton kernel "
                "within reach (named by its function, or defined in its file): the results "
                "come from something else (torch operations, the host)",
                evidence=(("call", call), ("languages", "triton")),
                severity="warn" if observation.problem.contract.library_calls else "fail",
                shrinks=False,
            )
        if outcome.interpreted_launches == 0:
            library = observation.problem.contract.library_calls
            return Failure(
                key="no-triton-launch",
                title="has Triton kernels within reach (named by its function, or defined in "
                "its file) but launched none of them in a call at the first workload: the "
                "results come from something else (torch operations, the host)",
                evidence=(("call", call), ("calls", len(observation.result.calls))),
                severity="warn" if library else "fail",
                shrinks=False,  # at the first workload: a tiny case may go to torch rightly
            )
    return None


def _short(name: str) -> str:
    return name if len(name) <= 60 else name[:57] + "..."
