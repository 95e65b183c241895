"""Roughly how long the training check takes, before it starts: part of an audit's expected
seconds (`engine.budget.expected_seconds`), which `kernelaudit demo` announces and its lanes
count down.

The check's time is its steps, not its probes: the model's steps run in the auditor, one slot
call of each to the candidate's process, bound by the host rather than the device, so the cost
model of the probes (`inputs.cost`) says nothing of it. On a GPU it is most of a bundled
example's `quick` audit (55% of the candidates' seconds summed on an H200), where the probes'
estimate alone announced "about 3 minutes" for a demo of 7. A candidate pays for the
reference's runs too where it is the first of its problem to train in the process (later ones
take them from the first, `training.experiment`).

An estimate only: nothing here weighs on what an audit plans, trains or judges.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelaudit.problem.spec import Problem
from kernelaudit.profiles import Profile


@dataclass(frozen=True)
class StepSeconds:
    """Seconds a step of the check costs, per dtype configuration trained."""

    candidate: float
    """The candidate's runs alone (the reference's made already)."""
    with_reference: float
    """The candidate's runs with the reference's (its own, the envelope's and their shadows)
    made beside them."""


STEP_SECONDS = {
    "cpu": StepSeconds(candidate=0.37, with_reference=0.83),
    "cuda": StepSeconds(candidate=0.21, with_reference=0.55),
}
"""Fitted on the bundled examples' `quick` audits in the demo (docs/benchmarks.md, "The demo's
estimate counts the training"). On a GPU, the checks' seconds over their steps on an H200
(0.16-0.26 and 0.47-0.64 s a step). On a CPU, those of a 2-core host (0.16-0.30 and 0.31-0.68
s) times 1.6, how much longer the cost model's estimate of that host's demo was than the demo
(403 s announced, 251 s taken): an announcement before any run of a machine's own is at the
pace of the hosts the CPU's cost model was fitted on throughout (`engine.pace`)."""


def training_seconds(
    problem: Problem, profile: Profile, device: str, *, reference_runs: bool
) -> float:
    """The seconds the training check should take in an audit of a candidate of `problem`
    (none where the problem has no slot to train); `reference_runs`: whether this audit makes
    the reference's runs (the first candidate of its problem in the process)."""
    if not problem.slot:
        return 0.0
    cost = STEP_SECONDS["cuda" if device.startswith("cuda") else "cpu"]
    per_step = cost.with_reference if reference_runs else cost.candidate
    trained = profile.trained_configs(len(problem.dtype_configs()))
    return trained * profile.training_steps(device) * per_step
