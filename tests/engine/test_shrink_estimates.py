"""What shrinking a finding costs, as its allowance counts it: a rerun of a timed probe times
the candidate again (the timed repetitions, the profiler, the auditor's clock), which a GPU
audit paid at 0.5 to 3.8 s a rerun while the estimate counted one call."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.checks.base import PlanContext, Probe
from kernelaudit.checks.timing import timing_probe
from kernelaudit.engine.budget import SHRINK_SHARE, probe_seconds
from kernelaudit.engine.shrink import rerun_seconds
from kernelaudit.inputs.cost import cost_model
from kernelaudit.problem.spec import Output, Problem, TensorInput
from kernelaudit.profiles import profile_named


def _add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


_PROBLEM = Problem(
    name="add",
    reference=_add,
    axes=("rows", "cols"),
    inputs=(TensorInput("x", ("rows", "cols")), TensorInput("y", ("rows", "cols"))),
    outputs=(Output("out", ("rows", "cols"), "x"),),
    workloads=({"rows": 256, "cols": 1024},),
)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_timed_rerun_is_counted_with_its_timing_and_an_untimed_one_by_its_calls(
    device: str,
) -> None:
    ctx = PlanContext(_PROBLEM, profile_named("quick"), device, 132)
    timed = timing_probe(ctx)
    plain = Probe("numerics", timed.case)
    calls = probe_seconds(_PROBLEM, timed, device)
    assert calls == pytest.approx(probe_seconds(_PROBLEM, plain, device))
    assert rerun_seconds(_PROBLEM, plain, device) == pytest.approx(calls)
    assert rerun_seconds(_PROBLEM, timed, device) == pytest.approx(
        calls + cost_model(device).timed_rerun_s
    )


def test_a_quick_gpu_audit_affords_few_timed_reruns_for_shrinking() -> None:
    """Eight timed reruns of a timing finding (a profile's shrink budget) cost a GPU audit
    about 14 s; the `quick` allowance (30% of 10 s) now covers one, where it covered every one."""
    quick = profile_named("quick")
    ctx = PlanContext(_PROBLEM, quick, "cuda", 132)
    allowance = SHRINK_SHARE * quick.budget_s
    timed = timing_probe(ctx)
    assert quick.shrink_budget * probe_seconds(_PROBLEM, timed, "cuda") < allowance
    assert 1 <= allowance // rerun_seconds(_PROBLEM, timed, "cuda") <= 2
