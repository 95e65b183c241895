"""Where planning goes: each check's plan timed, and the batch axes inferred from the
reference counted apart from the check that asked for them first, in the JSON report and in
the progress."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from kernelaudit.engine.audit import audit
from kernelaudit.engine.planning import INFERRING, planning_said
from kernelaudit.engine.progress import ProgressEvent
from kernelaudit.inputs import batch
from kernelaudit.problem.spec import Contract, Output, Problem, TensorInput

pytestmark = pytest.mark.slow

ROWS = Problem(
    name="scaled_rows",
    reference=lambda x, s: x * s[:, None],
    axes=("rows", "cols"),
    inputs=(TensorInput("x", ("rows", "cols")), TensorInput("s", ("rows",))),
    outputs=(Output("y", ("rows", "cols"), "x"),),
    workloads=({"rows": 64, "cols": 32},),
)
CANDIDATE = """
def scaled(x, s):
    return x * s[:, None]
"""
CHECKS = ["numerics", "specialisation", "batch-invariance"]


SLOW_S = 2.5


def _slow_inference(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The batch axes inferred as from a heavy reference, `SLOW_S` on the host; the problems
    inferred, in order."""
    real, inferred = batch.infer_batch_axes, []

    def slow(problem: Problem) -> tuple[str, ...]:
        inferred.append(problem.name)
        time.sleep(SLOW_S)
        return real(problem)

    monkeypatch.setattr(batch, "infer_batch_axes", slow)
    return inferred


def test_the_inference_of_batch_axes_is_counted_apart_and_named_in_the_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "candidate.py").write_text(CANDIDATE)
    problem = replace(ROWS, name="scaled_rows_inferred")  # batch axes not yet inferred here
    inferred = _slow_inference(monkeypatch)
    events: list[ProgressEvent] = []
    report = audit(
        problem, f"{tmp_path / 'candidate.py'}::scaled", "quick", "cpu", CHECKS, events.append
    )
    assert inferred == [problem.name]  # once, though two checks need the axes
    planning = dict(report.planning_seconds)
    checks = dict(report.coverage)  # the chosen checks, and those every audit runs
    assert set(CHECKS) <= set(checks)
    assert set(planning) == {*checks, INFERRING}
    assert planning[INFERRING] >= SLOW_S
    # not counted again in the check that asked first (specialisation)
    assert all(planning[name] < SLOW_S for name in checks)
    assert dict(report.phases)["planning"] >= planning[INFERRING]
    (said,) = [e.what for e in events if e.kind == "phase" and e.what.startswith("planning")]
    named, _, shown = said.removesuffix(" s)").rpartition(", ")
    assert named == f"planning (longest: {INFERRING}"
    assert abs(float(shown) - planning[INFERRING]) <= 0.06
    assert report.to_json()["planning_seconds"] == planning


def test_a_problem_that_declares_its_batch_axes_infers_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "candidate.py").write_text(CANDIDATE)
    declared = replace(ROWS, name="scaled_rows_declared", contract=Contract(batch_axes=("rows",)))
    inferred = _slow_inference(monkeypatch)
    events: list[ProgressEvent] = []
    report = audit(
        declared, f"{tmp_path / 'candidate.py'}::scaled", "quick", "cpu", CHECKS, events.append
    )
    assert inferred == []
    assert set(dict(report.planning_seconds)) == set(dict(report.coverage))
    assert next(e.what for e in events if e.kind == "phase") == "planning"


def test_planning_names_its_longest_part_only_past_a_second() -> None:
    assert planning_said({}) == "planning"
    assert planning_said({"numerics": 0.2, "timing": 0.9}) == "planning"
    assert planning_said({"numerics": 0.2, INFERRING: 13.14}) == (
        f"planning (longest: {INFERRING}, 13.1 s)"
    )
