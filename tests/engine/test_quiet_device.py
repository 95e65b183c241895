"""Probes that measure the device (times, kernels, memory) run after every other probe, and
only once the checks working on the device in the background (the sanitizer) are done."""

from pathlib import Path
from typing import ClassVar

import pytest

from kernelaudit.checks import build_checks
from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe, RunPlan, Step
from kernelaudit.engine.audit import run_audit
from kernelaudit.engine.probing import measures_the_device, quiet_last
from kernelaudit.formats import read_candidate, read_problem
from kernelaudit.inputs.case import Case
from kernelaudit.profiles import profile_named

FIXTURE = Path(__file__).parent / "fixtures" / "recorded_inputs.py"


class _Background:
    """A check with work in the background: it notes when it was asked to quiet down."""

    name: ClassVar[str] = "background"
    summary: ClassVar[str] = "records the order of events"

    def __init__(self) -> None:
        self.events: list[str] = []

    def plan(self, ctx: PlanContext) -> list[Probe]:
        return []

    def judge(self, observation: Observation) -> list[Failure]:
        probe = observation.probe
        self.events.append("measuring" if measures_the_device(probe) else "plain")
        return []

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []

    def quiet(self) -> None:
        self.events.append("quiet")


def test_measuring_probes_go_last_in_their_planned_order():
    case = Case((("rows", 64), ("cols", 32)))
    timed = Probe("timing", case, RunPlan(steps=(Step(timed=True),)))
    memory = Probe("memory", case, RunPlan(steps=(Step(), Step(memory=True))))
    plain = [Probe("numerics", case), Probe("unwritten", case, RunPlan(("nan", "sentinel")))]
    assert quiet_last([timed, plain[0], memory, plain[1]]) == [*plain, timed, memory]


@pytest.mark.slow
def test_the_device_is_quiet_before_the_first_measuring_probe():
    problem = read_problem(FIXTURE)
    problem, candidate = read_candidate(f"{FIXTURE}::doubled", problem)
    background = _Background()
    checks = [*build_checks(["timing", "numerics"]), background]
    report = run_audit(problem, candidate, profile_named("quick"), "cpu", checks)
    assert report.verdict == "PASS"
    events = background.events
    assert events.count("quiet") == 1
    first_measuring = events.index("measuring")
    assert events.index("quiet") == first_measuring - 1
    assert "plain" not in events[first_measuring:]
