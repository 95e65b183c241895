"""A time below the measured roofline fails only where the roofline is a floor: on a GPU. On a
CPU, whose roofline moves with whatever else the host runs, it is a note."""

from dataclasses import replace

import pytest
import torch

from kernelaudit.checks.base import Expected, Observation, Probe
from kernelaudit.checks.timing import Timing
from kernelaudit.inputs.case import Case
from kernelaudit.problem.spec import Contract, Output, Problem, TensorInput
from kernelaudit.runner.boundary.messages import CallOutcome, InvocationResult
from kernelaudit.timing.measure import Timing as Measured
from kernelaudit.timing.roofline import Roofline

ROOFLINE = Roofline(
    device="a made-up device",
    bandwidth_bytes_per_s=1e9,
    flops_per_s={"float32": 1e12},
    method="made up for the test",
)


def observation(device: str, seconds: float, roofline: Roofline = ROOFLINE) -> Observation:
    problem = Problem(
        name="copy",
        reference=lambda x: x.clone(),
        axes=("n",),
        inputs=(TensorInput("x", ("n",), dtypes=(torch.float32,)),),
        outputs=(Output("y", ("n",), "x"),),
        workloads=({"n": 1024},),
        contract=Contract(deterministic=False),
    )
    x = torch.ones(1024)
    timed = Measured(seconds, seconds, seconds, 10, 3, "test", 0.0, (seconds,) * 10)
    return Observation(
        problem=problem,
        probe=Probe("timing", Case((("n", 1024),))),
        result=InvocationResult(calls=(CallOutcome(outputs=(x.clone(),), timing=timed),)),
        inputs={"x": x},
        expected=Expected(("y",), (x.double(),), (x.clone(),), (torch.float32,)),
        measurements={"roofline": roofline, "flops": 0, "bytes": 8 * 1024, "dtype": "float32"},
        device=device,
    )


@pytest.mark.parametrize(("device", "severity"), [("cpu", "note"), ("cuda", "fail")])
def test_beating_the_floor_fails_on_a_gpu_and_is_a_note_on_a_cpu(device, severity):
    # 8 KiB at 1 GB/s take at least 8.2 us; 1 us is impossible on this roofline
    found = {f.key: f for f in Timing().judge(observation(device, 1e-6))}
    assert found["beats-floor"].severity == severity
    if device == "cpu":
        assert "not a failure" in found["beats-floor"].title


def test_a_time_above_the_floor_says_nothing_of_it():
    found = {f.key for f in Timing().judge(observation("cpu", 1e-4))}
    assert "beats-floor" not in found and "times" in found


def test_a_floor_measured_while_the_gpu_was_unsteady_is_a_note():
    # the bandwidth's samples had a median three times their fastest: the device was busy
    # throughout, so its fastest sample may be slow too, and the floor above the truth
    unsteady = replace(ROOFLINE, spread={"bandwidth": 3.0, "float32": 1.01})
    found = {f.key: f for f in Timing().judge(observation("cuda", 1e-6, unsteady))}
    assert found["beats-floor"].severity == "note"
    assert "unsteady" in found["beats-floor"].title
    assert "bandwidth (median 3.00x its fastest sample)" in found["beats-floor"].title
    # measured steadily, the same time fails, and says how steady the floor was
    steady = replace(ROOFLINE, spread={"bandwidth": 1.03, "float32": 1.01})
    failed = {f.key: f for f in Timing().judge(observation("cuda", 1e-6, steady))}
    assert failed["beats-floor"].severity == "fail"
    assert "within 1.03x of them" in failed["beats-floor"].title
