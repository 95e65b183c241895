"""Probes of different checks that make the same calls on the same case share one run of the
candidate, and each check judges it as its own probe: a defect shows in every check that looks
for it, as when each probe ran alone."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kernelaudit.engine import probing
from kernelaudit.engine.audit import audit
from kernelaudit.problem.load import load_problem
from kernelaudit.runner.auditor import process

EXAMPLE = Path(__file__).parents[2] / "examples" / "rmsnorm_backward"

_CANDIDATES = """
import torch


def correct(grad_out, x, weight, rstd):
    compute = torch.promote_types(x.dtype, torch.float32)
    g, r = grad_out.to(compute), rstd.to(compute)[:, None]
    x_hat = x.to(compute) * r
    weighted = weight.to(compute) * g
    grad_x = r * (weighted - x_hat * (weighted * x_hat).mean(dim=-1, keepdim=True))
    return grad_x.to(x.dtype), (g * x_hat).sum(dim=0).to(weight.dtype)


def weight_gradient_halved(grad_out, x, weight, rstd):
    grad_x, grad_weight = correct(grad_out, x, weight, rstd)
    return grad_x, grad_weight * 0.5
"""


@pytest.fixture
def invocations(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many invocations each audit sent to its worker."""
    counted: Counter[str] = Counter()
    run = process.Worker.run

    def counting(self, invocation, *args, **kwargs):  # type: ignore[no-untyped-def]
        counted["invocations"] += 1
        return run(self, invocation, *args, **kwargs)

    monkeypatch.setattr(process.Worker, "run", counting)
    return counted


def test_the_same_calls_of_two_checks_run_once(tmp_path: Path, invocations: Counter[str]) -> None:
    (tmp_path / "candidates.py").write_text(_CANDIDATES)
    problem = load_problem(EXAMPLE / "problem.py")
    report = audit(
        problem, f"{tmp_path / 'candidates.py'}::correct", "quick", "cpu", ["numerics", "gradients"]
    )
    assert report.verdict == "PASS"
    budget = dict(report.budget)
    shared = budget["probes_sharing_a_run"]
    # the gradients check's plain runs of the workloads are the numerics sweep's
    assert shared > 0
    judged = Counter(record.check for record in report.records)
    assert judged["numerics"] > 0 and judged["gradients"] > 0
    assert invocations["invocations"] == len(report.records) - shared


def test_a_defect_on_a_shared_run_fails_every_check_that_looks_for_it(tmp_path: Path) -> None:
    (tmp_path / "candidates.py").write_text(_CANDIDATES)
    problem = load_problem(EXAMPLE / "problem.py")
    candidate = f"{tmp_path / 'candidates.py'}::weight_gradient_halved"
    report = audit(problem, candidate, "quick", "cpu", ["numerics", "gradients"])
    assert report.verdict == "FAIL" and dict(report.budget)["probes_sharing_a_run"] > 0
    failing = {f.check for f in report.findings if f.severity == "fail"}
    assert failing == {"numerics", "gradients"}
    # and each check's failures name its own probes' cases, shared runs among them
    by_check = Counter(r.check for r in report.records if r.failures)
    assert by_check["numerics"] > 0 and by_check["gradients"] > 0


def test_a_run_too_large_to_hold_is_made_again(
    tmp_path: Path, invocations: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # no host memory to spare for held runs: every probe calls the candidate itself
    monkeypatch.setattr(probing, "cache_bytes", lambda: 0)
    (tmp_path / "candidates.py").write_text(_CANDIDATES)
    problem = load_problem(EXAMPLE / "problem.py")
    report = audit(
        problem, f"{tmp_path / 'candidates.py'}::correct", "quick", "cpu", ["numerics", "gradients"]
    )
    assert report.verdict == "PASS"
    assert dict(report.budget)["probes_sharing_a_run"] == 0
    assert invocations["invocations"] == len(report.records)


@pytest.mark.parametrize(("share_of", "held"), [("result", False), ("everything", True)])
def test_a_run_is_held_only_where_all_it_keeps_alive_fits(
    monkeypatch: pytest.MonkeyPatch, share_of: str, held: bool
) -> None:
    import torch

    from kernelaudit.checks.base import Expected, Observation, Probe, RunPlan
    from kernelaudit.inputs.case import Case
    from kernelaudit.runner.boundary.messages import CallOutcome, InvocationResult

    # a float32 result of 1,000 elements whose case holds 100,000 of input and float64 truth
    result = torch.zeros(1000)
    x, truth = torch.zeros(100_000), torch.zeros(100_000, dtype=torch.float64)
    expected = Expected(("y",), (truth,), (result.clone(),), (torch.float32,))
    case = Case(sizes=(("n", 1000),))
    probe = Probe("numerics", case, RunPlan())
    problem = load_problem(EXAMPLE / "problem.py")
    returned = InvocationResult(calls=(CallOutcome(outputs=(result,)),))
    seen = Observation(problem, probe, returned, {"x": x}, expected)
    everything = 4 * (1000 + 1000 + 100_000) + 8 * 100_000
    room = {"result": 4 * 1000, "everything": everything}[share_of]
    # the held runs' share of the kept cases' (`_SHARED_SHARE`) is exactly that room
    monkeypatch.setattr(probing, "cache_bytes", lambda: int(room / probing._SHARED_SHARE))
    runs = probing._SharedRuns([probe, Probe("gradients", case, RunPlan())])
    assert runs.taken(probe) is None
    runs.made(probe, seen)
    again = runs.taken(Probe("gradients", case, RunPlan()))
    assert (again is not None) == held
