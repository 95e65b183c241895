"""The reference's runs trained in helper processes: the same runs as in the auditor, and the
auditor's own runs whenever a helper cannot train them."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import torch

from kernelaudit.problem.load import load_problem
from kernelaudit.sourcefile import compiled_digest
from kernelaudit.training.data import batches, token_stream
from kernelaudit.training.experiment import _reference_runs, _references, slot_dtypes
from kernelaudit.training.helpers import (
    HelpersFailed,
    Member,
    Unit,
    _start,
    _train,
    reference_mark,
)
from kernelaudit.training.loop import Experiment, Shadowed, Trajectory
from kernelaudit.training.model import ModelConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
_CONFIG = ModelConfig(vocab=64, hidden=16, layers=1, heads=2, seq=8, mlp_hidden=32)


def _same(a: Trajectory | Shadowed, b: Trajectory | Shadowed) -> None:
    """The same run, bit for bit."""
    assert (a.optimizer, a.slot_calls, a.error) == (b.optimizer, b.slot_calls, b.error)
    if isinstance(a, Trajectory) and isinstance(b, Trajectory):
        assert a.losses == b.losses
        ours, theirs = a.parameters, b.parameters
    else:
        assert isinstance(a, Shadowed) and isinstance(b, Shadowed)
        ours, theirs = a.drift, b.drift
    assert ours.keys() == theirs.keys() and ours
    for name in ours:
        assert torch.equal(ours[name], theirs[name]), name


@pytest.mark.parametrize("logits", [torch.float32, torch.float16])
def test_helpers_train_the_runs_the_auditor_trains(logits: torch.dtype) -> None:
    # float32 results add the biased run; the perturbed plugs' shadows go on from the calls of
    # their free runs, in groups of two across three helpers (helpers train on a CPU only)
    problem = load_problem(EXAMPLES / "cross_entropy_backward" / "problem.py")
    config = next(k for k, c in enumerate(problem.dtype_configs()) if c["logits"] == logits)
    experiment = Experiment(_CONFIG, steps=4, batch=4)
    tokens = batches(token_stream(64, 4096, 0), 4, 8, 4, 0)
    dtypes = slot_dtypes(problem, config)
    try:
        here, by_auditor = _reference_runs(
            problem, config, dtypes, experiment, tokens, "cpu", helpers=0
        )
        _references.clear()
        there, by_helpers = _reference_runs(
            problem, config, dtypes, experiment, tokens, "cpu", helpers=3
        )
    finally:
        _references.clear()
    assert (by_auditor, by_helpers) == ("the auditor", "3 helper processes")
    assert here is not None and there is not None and here.keys() == there.keys()
    for optimizer, (reference, perturbed, shadows) in here.items():
        theirs = there[optimizer]
        _same(reference, theirs[0])
        assert len(perturbed) == len(theirs[1]) == (4 if logits == torch.float32 else 3)
        assert len(shadows) == len(theirs[2]) == len(perturbed) + 1
        for ours, helped in zip([*perturbed, *shadows], [*theirs[1], *theirs[2]], strict=True):
            _same(ours, helped)


def test_a_problem_file_changed_since_the_auditor_read_it_is_trained_in_the_auditor(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "cross_entropy_backward"
    shutil.copytree(EXAMPLES / "cross_entropy_backward", folder)
    source = folder / "problem.py"
    problem = load_problem(source)
    experiment = Experiment(_CONFIG, steps=2, batch=4)
    tokens = batches(token_stream(64, 4096, 0), 4, 8, 2, 0)
    dtypes = slot_dtypes(problem, 0)
    mark = reference_mark(problem.reference)
    unit = Unit("sgd", (Member("native"),))

    digest = compiled_digest(problem.reference, source)
    assert digest == hashlib.sha256(source.read_bytes()).hexdigest()
    settings = (problem.slot, dtypes, experiment, tokens, "cpu", 1)

    # the helper's side refuses a file whose text is not the one the auditor compiled
    _start(str(source), "0" * 64, mark, *settings)
    with pytest.raises(HelpersFailed, match="changed since the auditor read it"):
        _train(unit)
    # and a reference that is not the auditor's
    _start(str(source), digest, "elsewhere:", *settings)
    with pytest.raises(HelpersFailed, match="is not the auditor's"):
        _train(unit)

    # the auditor trains the runs itself when its helpers cannot, and says why
    source.write_text(source.read_text() + "\n# edited after it was read\n")
    try:
        runs, trained_by = _reference_runs(problem, 0, dtypes, experiment, tokens, "cpu", helpers=2)
    finally:
        _references.clear()
    assert runs is not None and all(shadows for _, _, shadows in runs.values())
    assert trained_by.startswith("the auditor (a training helper failed")
    assert "changed since the auditor read it" in trained_by
