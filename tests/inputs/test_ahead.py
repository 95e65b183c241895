"""The next probe's large draws made while the worker runs: the same values the case would draw
itself, never drawn twice, bounded, and an audit that draws ahead reports what one that does not
reports."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernelaudit.engine import executor as executor_module
from kernelaudit.engine.audit import audit
from kernelaudit.inputs import ahead as ahead_module
from kernelaudit.inputs import materialize as materialize_module
from kernelaudit.inputs.ahead import DrawsAhead, own_draws
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import materialize
from kernelaudit.inputs.reuse import Draws
from kernelaudit.problem.spec import Output, Problem, TensorInput

# rows scaled by a factor each: the rows (2^20 elements) are a draw the cases keep, the factors
# are drawn where each case is made
LAYER = Problem(
    name="scaled_rows",
    reference=lambda x, s: x * s[:, None],
    axes=("rows", "cols"),
    inputs=(TensorInput("x", ("rows", "cols")), TensorInput("s", ("rows",))),
    outputs=(Output("y", ("rows", "cols"), "x"),),
    workloads=({"rows": 1024, "cols": 1024},),
)


def _case(seed: int = 0, **values: str) -> Case:
    return Case((("rows", 1024), ("cols", 1024)), 0, tuple(sorted(values.items())), (), seed)


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> Draws:
    draws = Draws(1 << 30)
    monkeypatch.setattr(materialize_module, "DRAWS", draws)
    return draws


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(input, thread) of every draw `materialize` and the draws ahead make."""
    made: list[tuple[str, str]] = []
    real = materialize_module._draw

    def counted(inp, *args, **kwargs):  # type: ignore[no-untyped-def]
        made.append((inp.name, threading.current_thread().name))
        return real(inp, *args, **kwargs)

    monkeypatch.setattr(materialize_module, "_draw", counted)
    return made


def test_a_draw_made_ahead_is_what_the_case_draws_and_is_not_drawn_again(
    kept: Draws, drawn: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    ahead = DrawsAhead(kept)
    case = _case(x="large")
    assert ahead.start(LAYER, [case, case]) == 1  # the rows; the factors are small
    ahead.settle()
    ahead.close()
    values = materialize(LAYER, case)
    assert [name for name, _ in drawn] == ["x", "s"]  # x once, ahead; s where the case is made
    assert drawn[0][1].startswith("draw-ahead")
    monkeypatch.setattr(materialize_module, "DRAWS", Draws(0))
    fresh = materialize(LAYER, case)
    assert torch.equal(values["x"], fresh["x"]) and torch.equal(values["s"], fresh["s"])
    assert ahead.start(LAYER, [case]) == 0  # kept already


def test_a_draw_that_fails_ahead_is_made_where_the_case_is_made(
    kept: Draws, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing() -> torch.Tensor:
        raise RuntimeError("out of memory")

    monkeypatch.setattr(ahead_module, "own_draws", lambda problem, case: [(("k", failing), 8)])
    ahead = DrawsAhead(kept)
    assert ahead.start(LAYER, [_case()]) == 1
    ahead.settle()  # the failure is not the auditor's: the case draws it again
    assert not kept.holds("k") and len(kept) == 0


def test_a_round_draws_at_most_a_quarter_of_what_the_kept_draws_hold() -> None:
    rows_bytes = 1024 * 1024 * 4
    assert DrawsAhead(Draws(4 * rows_bytes - 1)).start(LAYER, [_case()]) == 0
    roomy = DrawsAhead(Draws(4 * rows_bytes))
    assert roomy.start(LAYER, [_case()]) == 1
    roomy.close()


def test_only_the_draws_a_case_keeps_are_made_ahead() -> None:
    names = [key[0].name for (key, _), _ in own_draws(LAYER, _case())]  # type: ignore[index]
    assert names == ["x"]
    assert own_draws(LAYER, Case(_case().sizes, 0, (), (("x", "broadcast"),), 0)) == []
    assert own_draws(LAYER, Case((("rows", 8),), 0, (), (), 0)) == []  # a size it lacks
    window = replace(_case(), rows=("rows", 0, 8))  # drawn whole, then cut
    assert [key for (key, _), _ in own_draws(LAYER, window)] == [
        key for (key, _), _ in own_draws(LAYER, _case())
    ]


CANDIDATE = """
def scaled(x, s):
    return x * s[:, None]
"""


def test_an_audit_that_draws_ahead_reports_what_one_that_does_not_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drawn: list[tuple[str, str]]
) -> None:
    (tmp_path / "candidate.py").write_text(CANDIDATE)
    candidate = f"{tmp_path / 'candidate.py'}::scaled"
    monkeypatch.setattr(materialize_module, "DRAWS", Draws(0))
    alone = audit(LAYER, candidate, "quick", "cpu", ["numerics"])
    monkeypatch.setattr(materialize_module, "DRAWS", Draws(1 << 30))
    monkeypatch.setattr(executor_module, "DrawsAhead", lambda: DrawsAhead(materialize_module.DRAWS))
    monkeypatch.setattr(executor_module, "draws_ahead_on", lambda device: True)
    drawn.clear()
    ahead = audit(LAYER, candidate, "quick", "cpu", ["numerics"])
    assert any(thread.startswith("draw-ahead") for _, thread in drawn)
    assert ahead.verdict == alone.verdict == "PASS"
    assert ahead.workload_errors == alone.workload_errors and ahead.workload_errors
    cases = [(r.check, r.case, r.failures) for r in alone.records]
    assert [(r.check, r.case, r.failures) for r in ahead.records] == cases


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_an_audit_on_a_gpu_draws_ahead_and_reports_what_one_that_does_not_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drawn: list[tuple[str, str]]
) -> None:
    (tmp_path / "candidate.py").write_text(CANDIDATE)
    candidate = f"{tmp_path / 'candidate.py'}::scaled"
    monkeypatch.setattr(materialize_module, "DRAWS", Draws(1 << 30))
    monkeypatch.setattr(executor_module, "DrawsAhead", lambda: DrawsAhead(materialize_module.DRAWS))
    ahead = audit(LAYER, candidate, "default", "cuda", ["numerics", "replay"])
    assert any(thread.startswith("draw-ahead") for _, thread in drawn)
    monkeypatch.setattr(materialize_module, "DRAWS", Draws(0))
    monkeypatch.setattr(executor_module, "draws_ahead_on", lambda device: False)
    drawn.clear()
    alone = audit(LAYER, candidate, "default", "cuda", ["numerics", "replay"])
    assert not any(thread.startswith("draw-ahead") for _, thread in drawn)
    assert ahead.verdict == alone.verdict == "PASS"
    assert ahead.workload_errors == alone.workload_errors and ahead.workload_errors
    cases = [(r.check, r.case, r.failures) for r in alone.records]
    assert [(r.check, r.case, r.failures) for r in ahead.records] == cases
