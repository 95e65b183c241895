"""A slot reads a problem once for all its candidates, so that what is inferred from the
reference (its batch axes) is inferred once; read again when its file changes, and afresh for
every job where candidates run without the sandbox."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from running_corpora import IDENTITY, candidate

from kernelaudit.corpus import slot
from kernelaudit.corpus.jobs import Job, keyed
from kernelaudit.corpus.slot import job_message, run_job
from kernelaudit.inputs import batch
from kernelaudit.problem.spec import Problem
from kernelaudit.runner.auditor.sandbox import Isolation, isolation

pytestmark = pytest.mark.slow
CHECKS = ["specialisation"]  # plans a shape past the largest workload along its batch axes


@pytest.fixture(autouse=True)
def _own_key_and_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(slot, "_READ", type(slot._READ)())


@pytest.fixture
def inferred(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The problems whose batch axes were inferred, in order."""
    real, names = batch.infer_batch_axes, []

    def counted(problem: Problem) -> tuple[str, ...]:
        names.append(problem.name)
        return real(problem)

    monkeypatch.setattr(batch, "infer_batch_axes", counted)
    return names


def _answers(tmp_path: Path, problem: Path, *names: str) -> list[dict]:
    jobs = [Job(str(problem), f"{candidate(tmp_path, name)}::{name}") for name in names]
    return [
        run_job(job_message(key, job), "quick", CHECKS, "cpu")
        for key, job in keyed(jobs, "quick", CHECKS, tmp_path).items()
    ]


@pytest.mark.skipif(not isolation().confined, reason="candidates run without the sandbox here")
def test_a_problems_candidates_share_one_read_and_one_inference(
    tmp_path: Path, inferred: list[str]
) -> None:
    problem = Path(shutil.copy(IDENTITY, tmp_path / "identity.py"))
    answers = _answers(tmp_path, problem, "first", "second", "third")
    assert [a["report"]["verdict"] for a in answers] == ["PASS", "PASS", "PASS"]
    assert inferred == ["identity"]
    # a new version of the problem is a problem read anew
    problem.write_text(problem.read_text().replace('name="identity"', 'name="identity_v2"'))
    (answer,) = _answers(tmp_path, problem, "fourth")
    assert answer["report"]["problem"] == "identity_v2"
    assert inferred == ["identity", "identity_v2"]


def test_without_the_sandbox_every_job_reads_its_problem_afresh(
    tmp_path: Path, inferred: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slot, "isolation", lambda: Isolation("none", "bwrap is missing"))
    problem = Path(shutil.copy(IDENTITY, tmp_path / "identity.py"))
    answers = _answers(tmp_path, problem, "first", "second")
    assert [a["report"]["verdict"] for a in answers] == ["PASS", "PASS"]
    assert inferred == ["identity", "identity"]
