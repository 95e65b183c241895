"""The memory check: device memory that grows from call to call fails, memory held after a call
is a warning, and the call's peak is set next to the reference's (GPU only)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernelaudit.checks.base import Expected, Observation, PlanContext, Step
from kernelaudit.checks.memory import CALLS, Memory
from kernelaudit.engine.audit import audit
from kernelaudit.engine.measure import reference_memory
from kernelaudit.findings import AuditReport
from kernelaudit.problem.load import load_problem
from kernelaudit.profiles import PROFILES
from kernelaudit.runner.boundary.messages import CallOutcome, InvocationResult

FIXTURES = Path(__file__).parent / "fixtures"
MiB = 1 << 20


def context(device: str) -> PlanContext:
    return PlanContext(load_problem(FIXTURES / "row_scale.py"), PROFILES["quick"], device, 132)


def judged(
    held: list[int], peaks: list[int], reference: int | None = MiB, unseen: list[int] | None = None
) -> dict[str, tuple[str, str, dict[str, object]]]:
    """The memory check's failures, by key, for calls that held and peaked at these bytes."""
    ctx = context("cuda")
    (probe,) = Memory().plan(ctx)
    calls = tuple(
        CallOutcome(
            outputs=(),
            device_bytes_held=h,
            device_peak_bytes=p,
            device_bytes_unseen=u,
        )
        for h, p, u in zip(held, peaks, unseen or [0] * len(held), strict=True)
    )
    ones = torch.ones(8, 16, dtype=torch.float64)
    expected = Expected(("y",), (ones,), (ones.float(),), (torch.float32,))
    measured = {} if reference is None else {"reference peak bytes": reference}
    observation = Observation(
        ctx.problem, probe, InvocationResult(calls=calls), {}, expected, measurements=measured
    )
    return {f.key: (f.severity, f.title, dict(f.evidence)) for f in Memory().judge(observation)}


def test_a_cpu_gets_no_probes_and_a_gpu_five_measured_calls() -> None:
    assert Memory().plan(context("cpu")) == []
    (probe,) = Memory().plan(context("cuda"))
    assert probe.case.label == "workload 0"
    assert probe.plan.steps == (Step(memory=True, keep=False),) * CALLS
    assert reference_memory(context("cpu").problem, probe.case, {}, "cpu") == {}


def test_memory_that_grows_on_every_call_is_a_leak() -> None:
    found = judged([512, 1024, 1536, 2048, 2560], [MiB] * 5)
    severity, title, evidence = found["leak"]
    assert severity == "fail"
    assert title.startswith("device memory leaks: 512 B more stays allocated after each call")
    assert evidence["bytes per call"] == 512
    assert "held" not in found


def test_memory_held_but_not_growing_is_a_warning() -> None:
    found = judged([40 * MiB] * 5, [MiB] * 5)
    severity, title, evidence = found["held"]
    assert severity == "warn"
    assert title.startswith("the candidate keeps 40 MiB of device memory allocated after it")
    assert evidence["bytes held"] == 40 * MiB
    assert "leak" not in found
    # a library workspace's worth, held and not growing, is not the candidate's cache
    assert "held" not in judged([MiB] * 5, [MiB] * 5)
    # growth that stops is no leak either
    assert "leak" not in judged([0, 512, 512, 512, 512], [MiB] * 5)


def test_the_peak_is_a_note_next_to_the_reference_and_a_warning_far_above_it() -> None:
    found = judged([0] * 5, [8 * MiB, 3 * MiB, 3 * MiB, 3 * MiB, 3 * MiB])
    assert set(found) == {"peak"}
    severity, title, evidence = found["peak"]
    assert severity == "note"
    # the first call may pay for one-time work: the steady peak is the later calls'
    assert title == "peak device memory during a call: 3 MiB, the reference's 1 MiB (3x)"
    assert evidence["ratio"] == 3.0
    severity, _, _ = judged([0] * 5, [256 * MiB] * 5)["peak"]
    assert severity == "warn"
    # far above in ratio but not in bytes: a note
    assert judged([0] * 5, [40 * MiB] * 5, reference=MiB)["peak"][0] == "note"
    assert "peak" not in judged([0] * 5, [MiB] * 5, reference=None)


def test_memory_taken_around_the_allocator_that_grows_is_a_warning() -> None:
    found = judged([0] * 5, [MiB] * 5, unseen=[0, 2 * MiB, 4 * MiB, 6 * MiB, 8 * MiB])
    severity, title, evidence = found["leak-outside-allocator"]
    assert severity == "warn"
    assert title.startswith("device memory outside torch's allocator grows by 2 MiB per call")
    assert evidence["bytes per call"] == 2 * MiB


GPU = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def gpu_audit(candidate: str) -> AuditReport:
    profile = replace(PROFILES["quick"], shrink_budget=2)
    spec = f"{FIXTURES / 'row_scale_memory.py'}::{candidate}"
    return audit(FIXTURES / "row_scale.py", spec, profile, "cuda", ["memory"])


@pytest.mark.parametrize(
    ("candidate", "verdict", "keys"),
    [
        pytest.param("keeps_every_result", "FAIL", {"leak", "peak"}, marks=GPU),
        pytest.param("keeps_a_workspace", "PASS", {"held", "peak"}, marks=GPU),
        pytest.param("allocates_a_large_scratch", "PASS", {"peak"}, marks=GPU),
        pytest.param("scale", "PASS", {"peak"}, marks=GPU),
    ],
)
def test_memory_habits_are_told_apart_on_a_gpu(candidate: str, verdict: str, keys: set) -> None:
    report = gpu_audit(candidate)
    found = {f.key: f for f in report.findings if f.check == "memory"}
    assert report.verdict == verdict
    assert set(found) == keys, [f.title for f in report.findings]
    if candidate == "keeps_every_result":
        # one 8 x 16 float32 output a call, as the allocator rounds it
        assert dict(found["leak"].evidence)["bytes per call"] == 512
    if candidate == "keeps_a_workspace":
        held = dict(found["held"].evidence)["bytes held"]
        assert 48 * MiB <= held <= 48 * MiB + 4096  # the workspace, in its guarded buffer
    expected = "warn" if candidate == "allocates_a_large_scratch" else "note"
    assert found["peak"].severity == expected
