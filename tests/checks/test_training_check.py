"""The training check on the bundled embedding-gradient kernels (Triton, interpreted on a CPU).

fp16 is the configuration the CPU can run: Triton's interpreter has no bf16 atomics. The GPU run
of the same experiment in bf16 is in benchmarks/training_check.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelaudit.engine.audit import audit
from kernelaudit.problem.load import load_problem
from kernelaudit.runner.candidate import parse_candidate
from kernelaudit.training.experiment import run_experiment
from kernelaudit.training.loop import Experiment

EXAMPLE = Path(__file__).parents[2] / "examples" / "embedding_backward"
FP16 = 0


def _outcome(function: str):  # type: ignore[no-untyped-def]
    problem = load_problem(EXAMPLE / "problem.py")
    assert problem.dtype_configs()[FP16]["grad_out"] == torch.float16
    candidate = parse_candidate(f"{EXAMPLE / 'candidates.py'}::{function}")
    return run_experiment(problem, candidate, FP16, Experiment.for_device("cpu"), "cpu", 600.0)


def _raising(folder: Path) -> Path:
    candidate = folder / "raising.py"
    candidate.write_text(
        "def embedding_backward(grad_out, ids, num_embeddings):\n"
        "    raise RuntimeError('no kernel for this shape')\n"
    )
    return candidate


@pytest.mark.slow
def test_low_precision_gradient_departs_under_sgd_and_adamw_masks_it() -> None:
    outcome = _outcome("accumulate_in_low_precision")
    by_optimizer = {j.optimizer: j for j in outcome.judgements}
    assert by_optimizer["sgd"].departs
    assert not by_optimizer["adamw"].loss_departs
    assert "AdamW masks the error" in outcome.conclusion
    # the rows furthest off belong to the most frequent tokens
    hottest = outcome.rows[0]  # the row furthest from the reference
    assert hottest["times the median count"] > 10
    assert set(outcome.curves) == {"sgd", "adamw"}


@pytest.mark.slow
def test_training_check_reports_through_the_audit(tmp_path: Path) -> None:
    candidate = _raising(tmp_path)
    problem = load_problem(EXAMPLE / "problem.py")
    report = audit(problem, f"{candidate}::embedding_backward", "quick", "cpu", ["training"])
    training = [f for f in report.findings if f.check == "training"]
    assert len(training) == 1 and training[0].severity == "fail"
    assert "no kernel for this shape" in training[0].title + str(training[0].evidence)
    # the quick profile trains for half of the CPU's 150 steps
    assert "75 steps of 128x16 tokens" in dict(training[0].evidence)["experiment"]


def test_the_quick_profile_does_not_train_a_candidate_already_broken(tmp_path: Path) -> None:
    candidate = tmp_path / "clobbering.py"
    candidate.write_text(
        "import torch\n"
        "def embedding_backward(grad_out, ids, num_embeddings):\n"
        "    shape = (num_embeddings, grad_out.shape[1])\n"
        "    total = torch.zeros(shape, dtype=torch.float32, device=grad_out.device)\n"
        "    total.index_add_(0, ids, grad_out.float())\n"
        "    grad_out.zero_()  # scratch reuse of an input: a write the contract forbids\n"
        "    return total.to(grad_out.dtype)\n"
    )
    problem = load_problem(EXAMPLE / "problem.py")
    checks = ["numerics", "mutation", "training"]
    report = audit(problem, f"{candidate}::embedding_backward", "quick", "cpu", checks)
    assert report.verdict == "FAIL"
    training = [f for f in report.findings if f.check == "training"]
    assert [f.severity for f in training] == ["note"]
    assert "already fails mutation" in training[0].title


def test_when_the_reference_itself_cannot_train_nothing_is_judged(tmp_path: Path) -> None:
    source = (EXAMPLE / "problem.py").read_text().replace("problem = Problem(", "_all = Problem(")
    (tmp_path / "problem.py").write_text(
        source + "\n\ndef _refuses(grad_out, ids, num_embeddings):\n"
        "    raise RuntimeError('the reference refuses to run')\n\n\n"
        "import dataclasses\n\nproblem = dataclasses.replace(_all, reference=_refuses)\n"
    )
    candidate = _raising(tmp_path)
    problem = load_problem(tmp_path / "problem.py")
    report = audit(problem, f"{candidate}::embedding_backward", "quick", "cpu", ["training"])
    (training,) = [f for f in report.findings if f.check == "training"]
    # the candidate's stop is not held against it when the reference stops too
    assert training.severity == "warn" and report.verdict == "PASS"
    assert training.key.startswith("training-inconclusive")
    assert "the reference refuses to run" in training.title
    # each side's share of the experiment's time, which go on side by side
    by_side = dict(training.evidence)["seconds by side"]
    assert set(by_side) == {"reference's runs", "candidate's runs"}
    seconds = dict(training.evidence)["seconds"]
    assert all(0 <= spent <= seconds for spent in by_side.values())


def test_the_loss_of_runs_shorter_than_the_devices_usual_is_not_judged() -> None:
    problem = load_problem(EXAMPLE / "problem.py")
    candidate = parse_candidate(f"{EXAMPLE / 'candidates.py'}::wide_accumulator")
    short = Experiment.for_device("cpu", length=0.1)
    outcome = run_experiment(problem, candidate, FP16, short, "cpu", 600.0)
    assert outcome.judgements and not any(j.loss_judged for j in outcome.judgements)
    assert "not judged in runs this short" in outcome.conclusion


def test_a_candidate_that_cannot_load_where_it_trains_stops_with_the_loading_error(
    tmp_path: Path,
) -> None:
    candidate = tmp_path / "broken.py"
    candidate.write_text("raise ImportError('needs a library this machine lacks')\n")
    problem = load_problem(EXAMPLE / "problem.py")
    ref = parse_candidate(f"{candidate}::embedding_backward")
    outcome = run_experiment(problem, ref, FP16, Experiment.for_device("cpu", steps=20), "cpu", 600)
    assert "needs a library this machine lacks" in outcome.error
    assert outcome.judgements == () and outcome.curves == {}
