"""Candidates that rewrite, in their own process, what once measured their training.

The training loop, the model, the optimizers, the losses and the drift run in the auditor; the
candidate's process only answers its slot's calls. A candidate that rebinds the loop, the slot's
routing or the judgement where it runs changes nothing but its own process, and one that forges
its answers is stopped by the auditor's checks on them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kernelaudit.engine.audit import audit
from kernelaudit.findings import AuditReport
from kernelaudit.problem.load import load_problem
from kernelaudit.profiles import profile_named

EXAMPLE = Path(__file__).parents[2] / "examples" / "embedding_backward"

SHORT = dataclasses.replace(profile_named("quick"), training_length=10 / 150)
"""Ten steps on a CPU: enough for a halved gradient to leave the envelope."""

HONEST = """
import torch


def embedding_backward(grad_out, ids, num_embeddings):
    total = torch.zeros(num_embeddings, grad_out.shape[1], dtype=torch.float32)
    total.index_add_(0, ids, grad_out.float())
    return total.to(grad_out.dtype)
"""

# Wrong in its slot (half the gradient). On import it rebinds, in its process, the slot's
# routing (its own calls go to the reference's slot function at its dtypes), the loop's runs
# and the judgement (nothing departs). A loop that ran in its process would train the
# reference's trajectory and pass it.
REBINDS_THE_LOOP = """
import torch

from kernelaudit.training import envelope, loop, slots

_route = slots.Slots.call


def embedding_backward(grad_out, ids, num_embeddings):
    if slots.Slots.call is not _forged_route:
        raise RuntimeError("the forgery is not in place")
    total = torch.zeros(num_embeddings, grad_out.shape[1], dtype=torch.float32)
    total.index_add_(0, ids, grad_out.float())
    return (0.5 * total).to(grad_out.dtype)


def _forged_route(self, slot, *arguments):
    plug = self.plug
    if plug is None or plug.slot != slot or plug.function is not embedding_backward:
        return _route(self, slot, *arguments)
    self.plug = slots.Plug(slot, slots.REFERENCES[slot], plug.dtypes)
    try:
        return _route(self, slot, *arguments)
    finally:
        self.plug = plug


def _forged_judge(reference, perturbed, candidate, shadows, shadowed, token_rows=None):
    return envelope.Judgement(candidate.optimizer, 0.0, 0.0, 1.0, ())


_train = loop.train


def _forged_train(experiment, optimizer, plug, tokens, device):
    if plug is not None and plug.function is embedding_backward:
        plug = slots.Plug(plug.slot, slots.REFERENCES[plug.slot], plug.dtypes)
    return _train(experiment, optimizer, plug, tokens, device)


slots.Slots.call = _forged_route
loop.train = _forged_train
envelope.judge = _forged_judge
"""

# Right in its slot, but answers the auditor with what it likes: the process's own answering
# function is rebound to send numbers in place of tensors.
FORGES_ITS_ANSWERS = (
    HONEST
    + """
import sys


def _forged_answer(*arguments):
    return ("result", [0.0, 1.0])


sys.modules["__main__"].answer = _forged_answer
"""
)


# Right in its slot, but answers with a place in the results' shared memory far past what the
# auditor made of it: read there, the auditor would fault or read another buffer.
POINTS_PAST_ITS_REGION = (
    HONEST
    + """
import sys

from kernelaudit.runner.boundary.shared import SharedTensor


def _forged_answer(*arguments):
    return ("result", SharedTensor(1 << 40, "float32", (1024, 1024)))


sys.modules["__main__"].answer = _forged_answer
"""
)

# Right in its slot, but at every call tries to shrink every file it holds to nothing, the
# shared regions among them: the auditor's next copy into a shrunk region would fault and kill
# it.
SHRINKS_THE_REGIONS = """
import os

import torch


def embedding_backward(grad_out, ids, num_embeddings):
    total = torch.zeros(num_embeddings, grad_out.shape[1], dtype=torch.float32)
    total.index_add_(0, ids, grad_out.float())
    for fd in range(3, 256):
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
    return total.to(grad_out.dtype)
"""


def _audit(folder: Path, name: str, source: str) -> AuditReport:
    candidate = folder / f"{name}.py"
    candidate.write_text(source)
    problem = load_problem(EXAMPLE / "problem.py")
    return audit(problem, f"{candidate}::embedding_backward", SHORT, "cpu", ["training"])


def test_an_honest_candidate_trains_within_the_envelope(tmp_path: Path) -> None:
    report = _audit(tmp_path, "honest", HONEST)
    (training,) = [f for f in report.findings if f.check == "training"]
    assert report.verdict == "PASS"
    assert training.severity == "note" and training.key.startswith("trains-within-envelope")


def test_rebinding_the_loop_in_the_candidates_process_does_not_hide_a_wrong_gradient(
    tmp_path: Path,
) -> None:
    report = _audit(tmp_path, "rebinds_the_loop", REBINDS_THE_LOOP)
    (training,) = [f for f in report.findings if f.check == "training"]
    assert report.verdict == "FAIL"
    # judged, not stopped: its slot ran with the forgery in place, and every run departs
    assert training.severity == "fail" and training.key.startswith("departs:sgd+adamw")
    per_optimizer = dict(training.evidence)["per optimizer"]
    assert all(o["stopped"] is None for o in per_optimizer.values())
    assert all(o["loss gap in envelopes"] > 10 for o in per_optimizer.values())


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("forges_its_answers", FORGES_ITS_ANSWERS),
        ("points_past_its_region", POINTS_PAST_ITS_REGION),
    ],
)
def test_an_answer_forged_in_the_candidates_process_stops_it(
    tmp_path: Path, name: str, source: str
) -> None:
    report = _audit(tmp_path, name, source)
    (training,) = [f for f in report.findings if f.check == "training"]
    assert report.verdict == "FAIL"
    assert training.severity == "fail" and training.key.startswith("training-stopped")
    assert "which is not an answer" in training.title


def test_shrinking_the_shared_regions_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    report = _audit(tmp_path, "shrinks_the_regions", SHRINKS_THE_REGIONS)
    (training,) = [f for f in report.findings if f.check == "training"]
    # the regions are sealed against shrinking: it trains, and is judged, as the honest one
    assert report.verdict == "PASS"
    assert training.severity == "note" and training.key.startswith("trains-within-envelope")
