"""Checks: one module per family, each a plug-in behind `checks.base.Check`.

Adding a check is one new module and one line in REGISTRY.
"""

from __future__ import annotations

from kernelaudit.checks.aliasing import Aliasing
from kernelaudit.checks.autotune import Autotune
from kernelaudit.checks.base import Check
from kernelaudit.checks.batch_invariance import BatchInvariance
from kernelaudit.checks.bounds import Bounds
from kernelaudit.checks.coverage import unavailable
from kernelaudit.checks.deferred_work import DeferredWork
from kernelaudit.checks.determinism import Determinism
from kernelaudit.checks.execution import Execution
from kernelaudit.checks.global_state import GlobalState
from kernelaudit.checks.gradients import Gradients
from kernelaudit.checks.kernels import Kernels
from kernelaudit.checks.large_tensors import LargeTensors
from kernelaudit.checks.memory import Memory
from kernelaudit.checks.mutation import Mutation
from kernelaudit.checks.numerics import Numerics
from kernelaudit.checks.output_objects import OutputObjects
from kernelaudit.checks.races import Races
from kernelaudit.checks.replay import Replay
from kernelaudit.checks.sanitizer import Sanitizer
from kernelaudit.checks.specialisation import Specialisation
from kernelaudit.checks.stale_memory import StaleMemory
from kernelaudit.checks.timing import Timing
from kernelaudit.checks.training import Training
from kernelaudit.checks.tripwires import Tripwires
from kernelaudit.checks.triton_bounds import TritonBounds
from kernelaudit.checks.unwatched import Unwatched
from kernelaudit.checks.unwritten import Unwritten
from kernelaudit.checks.weak_cases import WeakCases
from kernelaudit.errors import UsageError
from kernelaudit.profiles import Profile

REGISTRY: tuple[type[Check], ...] = (
    # in order of diagnosis: the findings of earlier checks explain those of later ones
    Execution,
    OutputObjects,
    GlobalState,
    Unwritten,
    StaleMemory,
    Bounds,
    TritonBounds,
    Sanitizer,
    Mutation,
    Aliasing,
    DeferredWork,
    Replay,
    Determinism,
    Races,
    Specialisation,
    Numerics,
    Unwatched,
    Autotune,
    BatchInvariance,
    Gradients,
    Timing,
    Memory,
    Kernels,
    WeakCases,
    LargeTensors,
    Training,
    Tripwires,
)


def build_checks(names: list[str] | None = None) -> list[Check]:
    """Instantiate the named checks (all of them when `names` is None). The execution check
    always runs: nothing else can be judged from a run that failed."""
    known = {cls.name: cls for cls in REGISTRY}
    if names is None:
        return [cls() for cls in REGISTRY]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown check {unknown[0]!r}; choose from: {', '.join(known)}")
    wanted = {"execution", *names}
    return [cls() for cls in REGISTRY if cls.name in wanted]


def refuse_unavailable(names: list[str] | None, devices: list[str], profile: Profile) -> None:
    """A check named in --checks that cannot run on one of `devices` is a usage error (unknown
    names are one too): audited anyway it would plan nothing and say nothing there, a PASS the
    audit did not earn."""
    checks = build_checks(names)
    if names is None:
        return
    for device in dict.fromkeys(devices):
        for check in checks:
            why = unavailable(check, device, profile) if check.name in names else ""
            if why:
                raise UsageError(
                    f"--checks names {check.name!r}, which cannot run here ({device}, profile "
                    f"{profile.name!r}): it {why}. Leave it out of --checks, or audit where it "
                    "can run"
                )
