"""The candidate's training process: it answers slot calls, and nothing it sends is used before
the auditor has checked it against what the slot declares."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from kernelaudit.runner.candidate import CandidateRef
from kernelaudit.training.channel import CandidateProcess, ChannelStopped
from kernelaudit.training.data import batches, token_stream
from kernelaudit.training.loop import Experiment, train
from kernelaudit.training.model import ModelConfig
from kernelaudit.training.slots import REFERENCES, Plug, PlugRaised, Slots

SLOT = "embedding_backward"
DTYPES = (torch.float16, None, None)

CANDIDATES = '''
import os
import sys
import time

import torch


def honest(grad_out, ids, num_embeddings):
    total = torch.zeros(num_embeddings, grad_out.shape[1], dtype=torch.float32)
    total.index_add_(0, ids, grad_out.float())
    return total.to(grad_out.dtype)


def by_rows(grad_out, ids, num_embeddings):
    """A different wrong answer for each number of rows asked for."""
    right = honest(grad_out, ids, num_embeddings)
    if num_embeddings == 16:
        return right, right
    if num_embeddings == 17:
        return honest(grad_out, ids, num_embeddings + 1)
    if num_embeddings == 18:
        return right.float()
    if num_embeddings == 19:
        return None
    raise RuntimeError("no kernel for this shape")


def flooding(grad_out, ids, num_embeddings):
    return torch.zeros(1 << 18, grad_out.shape[1], dtype=torch.float64)  # 16 MiB


def scribbling(grad_out, ids, num_embeddings):
    os.write(int(sys.argv[2]), b"\\xff" * 64)  # its answer channel, named on its command line
    return honest(grad_out, ids, num_embeddings)


def sleeping(grad_out, ids, num_embeddings):
    time.sleep(60)


def exiting(grad_out, ids, num_embeddings):
    os._exit(3)
'''


@pytest.fixture(scope="module")
def candidates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("channel") / "candidates.py"
    path.write_text(CANDIDATES)
    return path


def _process(path: Path, function: str, deadline_s: float = 120.0) -> CandidateProcess:
    return CandidateProcess(CandidateRef(str(path), function), SLOT, "cpu", deadline_s)


def _call(process: Callable[..., object], rows: int = 16) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    grad_out = torch.randn(64, 8, generator=generator)
    ids = torch.randint(16, (64,), generator=generator)
    return Slots(Plug(SLOT, process, DTYPES)).call(SLOT, grad_out, ids, rows)


def test_a_run_with_the_candidate_in_its_process_trains_as_with_it_here(candidates: Path) -> None:
    config = ModelConfig(vocab=64, hidden=16, layers=1, heads=2, seq=8, mlp_hidden=32)
    experiment = Experiment(config, steps=4, batch=4)
    tokens = batches(token_stream(64, 4096, 0), 4, 8, 4, 0)
    here = Plug(SLOT, REFERENCES[SLOT], DTYPES)
    with _process(candidates, "honest") as process:
        assert process.ready() == ""
        there = train(experiment, "adamw", Plug(SLOT, process, DTYPES), tokens, "cpu")
    alone = train(experiment, "adamw", here, tokens, "cpu")
    assert there.losses == alone.losses and there.slot_calls == 4 and not there.error
    for name, value in alone.parameters.items():
        assert torch.equal(there.parameters[name], value), name


WRONG = {
    16: "a tuple of 2: a torch.float16 tensor of shape [16, 8]",
    17: "a torch.float16 tensor of shape [18, 8]",
    18: "a torch.float32 tensor of shape [18, 8]",
    19: "a NoneType",
}
"""What the candidate returns when asked for so many rows."""


def test_answers_unlike_the_slots_declaration_fail_naming_both(candidates: Path) -> None:
    with _process(candidates, "by_rows") as process:
        for rows, described in WRONG.items():
            with pytest.raises(RuntimeError) as failure:
                _call(process, rows)
            message = str(failure.value)
            assert f"slot {SLOT!r} returned {described}" in message
            assert f"expects a torch.float16 tensor of shape [{rows}, 8]" in message
        with pytest.raises(PlugRaised) as raised:
            _call(process, 20)
        assert str(raised.value) == "RuntimeError: no kernel for this shape"
        assert not process.stopped  # a wrong result stops the run, not the process


@pytest.mark.parametrize(
    ("function", "deadline_s", "said"),
    [
        ("flooding", 120.0, "more than the"),
        ("scribbling", 120.0, "not part of the protocol"),
        ("sleeping", 3.0, "took longer than 3 s"),
        ("exiting", 120.0, "the candidate's training process died"),
    ],
)
def test_an_answer_that_is_not_one_stops_the_process_for_good(
    candidates: Path, function: str, deadline_s: float, said: str
) -> None:
    with _process(candidates, function, deadline_s) as process:
        with pytest.raises(ChannelStopped, match=said):
            _call(process)
        assert said in process.stopped
        with pytest.raises(ChannelStopped):
            _call(process)


def test_a_candidate_that_cannot_be_imported_says_why(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("raise ImportError('needs a library this machine lacks')\n")
    with _process(broken, "honest") as process:
        said = process.ready()
        assert "loading broken.py::honest failed" in said
        assert "ImportError: needs a library this machine lacks" in said
        with pytest.raises(ChannelStopped, match="needs a library"):
            _call(process)


def test_where_shared_memory_is_refused_the_pipe_carries_the_calls(
    candidates: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*arguments: object) -> int:
        raise PermissionError("memfd_create refused by the host's filter")

    monkeypatch.setattr(os, "memfd_create", refused)
    with _process(candidates, "honest") as process:
        assert process.ready() == ""
        got = _call(process)
    assert torch.equal(got, _call(REFERENCES[SLOT]))
