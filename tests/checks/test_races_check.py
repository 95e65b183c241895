"""The races check: calls under noise kernels, from several threads at once and behind work
queued on the caller's stream, compared bit for bit with a call made alone (GPU only); a problem
allowed to vary is held to its error budget."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernelaudit import Contract
from kernelaudit.checks import numerics
from kernelaudit.checks.base import Expected, Observation, PlanContext, Probe, Step
from kernelaudit.checks.races import Races
from kernelaudit.engine.audit import audit
from kernelaudit.problem.load import load_problem
from kernelaudit.profiles import PROFILES
from kernelaudit.runner.boundary.messages import CallOutcome, InvocationResult

FIXTURES = Path(__file__).parent / "fixtures"


def context(stem: str, device: str, profile: str = "quick", **contract: object) -> PlanContext:
    problem = load_problem(FIXTURES / f"{stem}.py")
    if contract:
        problem = replace(problem, contract=Contract(**contract))  # type: ignore[arg-type]
    return PlanContext(problem, PROFILES[profile], device, 132)


def observed(probe: Probe, ctx: PlanContext, calls: list[CallOutcome]) -> Observation:
    """What a run of `probe` on row_scale (y of 8 x 16) produced, with y's truth all ones."""
    ones = torch.ones(8, 16, dtype=torch.float64)
    expected = Expected(("y",), (ones,), (ones.float(),), (torch.float32,))
    result = InvocationResult(calls=tuple(calls))
    return Observation(ctx.problem, probe, result, {}, expected, device="cuda")


def test_a_cpu_gets_no_probes() -> None:
    assert Races().plan(context("column_total", "cpu")) == []


def test_a_gpu_gets_runs_under_noise_threads_and_queued_work_on_exact_values() -> None:
    noise, threads, queued = Races().plan(context("column_total", "cuda", "default"))
    assert noise.case.label == threads.case.label == queued.case.label == "workload 0"
    # sums of small integers are exact in any order: a differing bit is a race
    assert noise.case.values == (("x", "small_integers"),)
    assert noise.plan.steps == (Step(),) + (Step(noise=True, keep=False),) * 20
    assert threads.plan.steps == (Step(),) + (Step(threads=4, keep=False),) * 2
    assert queued.plan.steps == (Step(),) + (Step(queued=True, keep=False),) * 3
    varying = Races().plan(context("column_total", "cuda", deterministic=False))
    # a problem allowed to vary has every run's outputs sent back, to judge their values
    assert varying[0].plan.steps == (Step(),) + (Step(noise=True, keep=True),) * 5


def test_the_results_every_run_keeps_are_held_to_a_share_of_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernelaudit.checks import races

    varying = context("column_total", "cuda", "default", deterministic=False)
    fixed = context("column_total", "cuda", "default")
    kept = races.kept_results(varying.problem, races.exact_case(varying))
    assert kept  # the first workload's output at its own dtype
    # a host with room for six such results in its share: five runs beside the call alone
    monkeypatch.setattr(races, "machine_memory", lambda: races.KEPT_SHARE * 6 * kept)
    noise, threads, queued = Races().plan(varying)
    assert noise.plan.steps == (Step(),) + (Step(noise=True, keep=True),) * 5
    assert threads.plan.steps == (Step(),) + (Step(threads=4, keep=True),) * 1
    assert queued.plan.steps == (Step(),) + (Step(queued=True, keep=True),) * 3
    # room for nine: a round of threads keeps its own call's results and every thread's
    monkeypatch.setattr(races, "machine_memory", lambda: races.KEPT_SHARE * 9 * kept)
    noise, threads, queued = Races().plan(varying)
    assert [len(noise.plan.steps), len(threads.plan.steps), len(queued.plan.steps)] == [9, 2, 4]
    # room for none beside the call alone: one run of each kind still
    monkeypatch.setattr(races, "machine_memory", lambda: kept)
    assert [len(p.plan.steps) for p in Races().plan(varying)] == [2, 2, 2]
    # runs compared bit for bit keep nothing: their number is the profile's
    assert [len(p.plan.steps) for p in Races().plan(fixed)] == [21, 3, 4]


def test_runs_under_noise_that_differ_are_reported_with_where_and_by_how_much() -> None:
    ctx = context("row_scale", "cuda")
    probe = Races().plan(ctx)[0]
    alone = CallOutcome(outputs=(torch.ones(8, 16),))
    calls = [alone] + [CallOutcome(outputs=(), noise_kernels=12) for _ in range(5)]
    calls[2] = replace(calls[2], mismatches=((-1, 0, 3, 40, 2.0),))
    calls[4] = replace(calls[4], mismatches=((-1, 0, 7, 21, 4.0),))
    (failure,) = Races().judge(observed(probe, ctx, calls))
    evidence = dict(failure.evidence)
    assert failure.key == "differs-noise:y"
    assert failure.severity == "fail"
    assert failure.title == (
        "'y': run 4 under noise differs from the call alone in 7 of 128 elements "
        "(largest difference 4); 2 of 5 such runs differ"
    )
    assert evidence["first index"] == (1, 5)
    assert evidence["condition"] == "noise"
    assert evidence["noise kernels launched on a side stream"] == 12


def test_threads_that_differ_or_fail_are_named() -> None:
    ctx = context("row_scale", "cuda")
    probe = Races().plan(ctx)[1]
    alone = CallOutcome(outputs=(torch.ones(8, 16),))
    rounds = [
        CallOutcome(outputs=(), thread_errors=("", "", "", "")),
        CallOutcome(
            outputs=(),
            mismatches=((2, 0, 1, 17, 0.5),),
            thread_errors=("", "RuntimeError: busy", "", ""),
        ),
    ]
    differs, failed = Races().judge(observed(probe, ctx, [alone, *rounds]))
    assert differs.key == "differs-threads:y"
    assert dict(differs.evidence)["run"] == "thread 3 of 4 calling at once (round 2)"
    assert dict(differs.evidence)["first index"] == (1, 1)
    assert (failed.key, failed.severity) == ("thread-error", "warn")
    assert failed.title == "thread 2 of 4 calling at once (round 2) failed: RuntimeError: busy"


def test_a_run_behind_queued_work_that_differs_is_named_so() -> None:
    ctx = context("row_scale", "cuda")
    probe = Races().plan(ctx)[2]
    alone = CallOutcome(outputs=(torch.ones(8, 16),))
    behind = CallOutcome(outputs=(), noise_kernels=40, mismatches=((-1, 0, 128, 0, float("nan")),))
    (failure,) = Races().judge(observed(probe, ctx, [alone, behind]))
    evidence = dict(failure.evidence)
    assert failure.key == "differs-queued:y"
    assert failure.title.startswith(
        "'y': run 1 behind work queued on the caller's stream differs from the call alone in "
        "128 of 128 elements"
    )
    assert evidence["kernels queued ahead of the inputs' values"] == 40
    assert evidence["runs that differ"] == "1 of 1"


def test_a_problem_allowed_to_vary_holds_every_run_and_thread_to_the_error_budget() -> None:
    ctx = context("row_scale", "cuda", deterministic=False)
    probe = Races().plan(ctx)[1]
    right, wrong = (torch.ones(8, 16),), (torch.zeros(8, 16),)
    calls = [
        CallOutcome(outputs=right),
        CallOutcome(outputs=right, thread_outputs=(right, right, right, right)),
        CallOutcome(outputs=right, thread_outputs=(right, wrong, right, right)),
    ]
    (failure,) = Races().judge(observed(probe, ctx, calls))
    assert failure.key.startswith("threads-error:")
    assert failure.title.startswith("thread 2 of 4 calling at once (round 2): y")
    calls[2] = calls[1]
    assert Races().judge(observed(probe, ctx, calls)) == []


def test_runs_giving_the_bytes_of_the_call_alone_are_judged_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compared: list[torch.Tensor] = []
    compare = numerics.compare_expected

    def counting(expected: Expected, k: int, values: torch.Tensor, *args: object) -> object:
        compared.append(values)
        return compare(expected, k, values, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(numerics, "compare_expected", counting)
    ctx = context("row_scale", "cuda", deterministic=False)
    probe = Races().plan(ctx)[1]
    # every run a tensor of its own, with the call alone's bytes
    same = [(torch.ones(8, 16),) for _ in range(10)]
    calls = [
        CallOutcome(outputs=same[0]),
        CallOutcome(outputs=same[1], thread_outputs=tuple(same[2:6])),
        CallOutcome(outputs=same[6], thread_outputs=tuple(same[6:10])),
    ]
    assert Races().judge(observed(probe, ctx, calls)) == []
    assert len(compared) == 1
    # a thread whose bytes differ is judged on its own
    calls[2] = replace(calls[2], thread_outputs=(same[6], (torch.zeros(8, 16),), *same[7:9]))
    compared.clear()
    (failure,) = Races().judge(observed(probe, ctx, calls))
    assert len(compared) == 2
    assert failure.title.startswith("thread 2 of 4 calling at once (round 2): y")


def test_a_case_already_wrong_alone_is_no_race_unless_a_run_errs_more() -> None:
    ctx = context("row_scale", "cuda", deterministic=False)
    probe = Races().plan(ctx)[1]
    # the case's values are beyond what the computation keeps: wrong alone, the same under
    # every condition (the numerics check's matter, not a race)
    off, worse = (torch.full((8, 16), 1.5),), (torch.full((8, 16), 3.0),)
    calls = [
        CallOutcome(outputs=off),
        CallOutcome(outputs=off, thread_outputs=(off, off, off, off)),
        CallOutcome(outputs=off, thread_outputs=(off, off, off, off)),
    ]
    assert Races().judge(observed(probe, ctx, calls)) == []
    calls[2] = CallOutcome(outputs=off, thread_outputs=(off, off, worse, off))
    (failure,) = Races().judge(observed(probe, ctx, calls))
    assert failure.title.startswith("thread 3 of 4 calling at once (round 2): y")


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    ("candidate", "racy"), [("releases_before_storing", True), ("releases_after_storing", False)]
)
def test_a_lock_released_before_its_stores_is_caught_on_a_gpu(candidate: str, racy: bool) -> None:
    report = audit(
        FIXTURES / "column_total.py",
        f"{FIXTURES / 'column_total_kernels.py'}::{candidate}",
        profile="default",
        device="cuda",
        checks=["races"],
    )
    found = [f for f in report.findings if f.check == "races"]
    if not racy:
        assert found == [], [f.title for f in found]
        return
    assert report.verdict == "FAIL"
    assert any(f.severity == "fail" and f.key.startswith("differs-") for f in found), [
        f.title for f in report.findings
    ]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    ("candidate", "early"), [("without_waiting", True), ("after_waiting", False)]
)
def test_a_candidate_on_its_own_stream_that_does_not_wait_for_the_caller_is_caught(
    candidate: str, early: bool
) -> None:
    report = audit(
        FIXTURES / "row_scale.py",
        f"{FIXTURES / 'side_stream_kernels.py'}::{candidate}",
        profile="quick",
        device="cuda",
        checks=["numerics", "races"],
    )
    found = [f for f in report.findings if f.check == "races"]
    if not early:
        assert report.verdict == "PASS", [f.title for f in report.findings]
        return
    # alone, on an idle device, it is right; behind queued work it reads the inputs too early
    assert not any(f.check == "numerics" for f in report.findings)
    assert [f.key for f in found if f.severity == "fail"] == ["differs-queued:y"], [
        f.title for f in found
    ]
