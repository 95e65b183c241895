"""The trusted side's measurements: FLOPs counted on shapes alone, beside the first probes,
agree with those counted on the device, and a reference that needs real values is counted
on the device instead."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from kernelaudit import Axis, Forward, Output, Problem, TensorInput
from kernelaudit.engine.measure import UNCOUNTED, count_flops, reference_timing
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import materialize, shapes_only


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def _by_its_values(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    rows = int((a[:, 0] > 0).sum().item())  # a shape only the values decide
    return a[:rows] @ b


def _problem(reference) -> Problem:
    return Problem(
        name="matmul",
        reference=reference,
        axes=(Axis("m"), Axis("k"), Axis("n")),
        inputs=(TensorInput("a", ("m", "k")), TensorInput("b", ("k", "n"))),
        outputs=(Output("c", ("m", "n"), dtype="a"),),
        workloads=({"m": 64, "k": 32, "n": 16},),
    )


CASE = Case((("m", 64), ("k", 32), ("n", 16)))


def test_flops_counted_on_shapes_alone_match_the_device_count() -> None:
    problem = _problem(_matmul)
    inputs = materialize(problem, CASE)
    ahead = count_flops(problem, CASE, inputs)
    assert ahead == 2 * 64 * 32 * 16
    assert reference_timing(problem, CASE, inputs, "cpu", ahead)["flops"] == ahead
    assert reference_timing(problem, CASE, inputs, "cpu")["flops"] == ahead


def test_flops_counted_ahead_need_no_values_and_run_no_forward() -> None:
    """What the counting beside the probes reads: shapes and dtypes alone. A backward problem's
    forward (which runs in float64 and switches torch's default dtype for the process while
    it does) is never run for it."""

    def forward_never_runs(a: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the forward ran while counting FLOPs")

    def scaled(a: torch.Tensor, b: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return (a @ b) * s[:, None]

    problem = Problem(
        name="scaled_matmul",
        reference=scaled,
        axes=(Axis("m"), Axis("k"), Axis("n")),
        inputs=(
            TensorInput("a", ("m", "k")),
            TensorInput("b", ("k", "n")),
            TensorInput("s", ("m",), dtypes=(torch.float32,), role="saved"),
        ),
        outputs=(Output("c", ("m", "n"), dtype="a"),),
        forward=Forward(function=forward_never_runs, takes=("a",), gives=("s",)),
        workloads=({"m": 64, "k": 32, "n": 16},),
    )
    shapes = shapes_only(problem, CASE)
    assert shapes is not None
    assert {name: tuple(t.shape) for name, t in shapes.items()} == {
        "a": (64, 32),
        "b": (32, 16),
        "s": (64,),
    }
    assert all(t.device.type == "meta" for t in shapes.values())
    assert torch.get_default_dtype() == torch.float32
    assert count_flops(problem, CASE, shapes) == 2 * 64 * 32 * 16  # the matmul's


def test_a_reference_that_needs_its_values_is_counted_on_the_device() -> None:
    problem = _problem(_by_its_values)
    inputs = materialize(problem, CASE)
    assert count_flops(problem, CASE, inputs) == UNCOUNTED
    rows = int((inputs["a"][:, 0] > 0).sum())
    found = reference_timing(problem, CASE, inputs, "cpu", UNCOUNTED)
    assert found["flops"] == (2 * rows * 32 * 16 or None)


def test_a_timed_audit_ends_with_the_measurements_made_ahead() -> None:
    """The FLOPs and the roofline, measured in a thread beside the first probes, are found by
    the timed one (run in a process of its own, so a hang fails the test instead of the
    suite)."""
    fixtures = Path(__file__).parents[1] / "redteam" / "fixtures"
    script = (
        "import sys; from kernelaudit.engine.audit import audit;"
        "from kernelaudit.problem.load import load_problem;"
        f"r = audit(load_problem({str(fixtures / 'problem' / 'double.py')!r}),"
        f" {str(fixtures / 'candidates' / 'plants_files.py') + '::double'!r},"
        " 'quick', 'cpu', ['timing']);"
        "print(r.verdict); print(*[f.title for f in r.findings if f.check == 'timing'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    verdict, timing = done.stdout.splitlines()[:2]
    assert verdict == "PASS"
    assert "per call" in timing and "roofline" in timing
