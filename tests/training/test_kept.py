"""The reference's training runs kept on disk: read back as made, by the next process too; never
read once changed; named by what they depend on, and by nothing a candidate writes."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernelaudit.problem.load import load_problem
from kernelaudit.problem.spec import Problem
from kernelaudit.runner.candidate import parse_candidate
from kernelaudit.training import experiment as experiments
from kernelaudit.training import kept
from kernelaudit.training.data import batches, token_stream
from kernelaudit.training.experiment import _reference_runs, run_experiment, slot_dtypes
from kernelaudit.training.loop import Experiment, Trajectory
from kernelaudit.training.model import ModelConfig
from kernelaudit.training.shadow import Shadowed

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL = Experiment(
    ModelConfig(vocab=64, hidden=16, layers=1, heads=2, seq=8, mlp_hidden=32), steps=3, batch=4
)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache and a sealing key of the test's own, and nothing made in this process before."""
    monkeypatch.setenv("KERNELAUDIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(experiments, "_references", {})
    monkeypatch.setattr(experiments, "_origins", {})


def _copied_example(name: str, into: Path) -> Path:
    folder = into / name
    shutil.copytree(EXAMPLES / name, folder)
    return folder / "problem.py"


def _made(problem: Problem, config: int = 0) -> dict[str, kept.Envelope]:
    tokens = batches(token_stream(64, 4096, 0), 4, 8, SMALL.steps, 0)
    dtypes = slot_dtypes(problem, config)
    runs = _reference_runs(problem, config, dtypes, SMALL, tokens, "cpu")
    assert runs is not None
    return runs


def _same(a: Trajectory | Shadowed, b: Trajectory | Shadowed) -> bool:
    first = a.parameters if isinstance(a, Trajectory) else a.drift
    second = b.parameters if isinstance(b, Trajectory) else b.drift
    same_losses = not isinstance(a, Trajectory) or (
        isinstance(b, Trajectory) and a.losses == b.losses
    )
    return (
        same_losses
        and (a.optimizer, a.slot_calls, a.error) == (b.optimizer, b.slot_calls, b.error)
        and list(first) == list(second)
        and all(
            x.dtype == y.dtype and torch.equal(x, y)
            for x, y in zip(first.values(), second.values(), strict=True)
        )
    )


def _all(runs: dict[str, kept.Envelope]) -> list[Trajectory | Shadowed]:
    return [run for envelope in runs.values() for run in kept._all(envelope)]


def test_a_set_the_experiment_made_is_read_back_as_it_was_made(tmp_path: Path) -> None:
    problem = load_problem(_copied_example("embedding_backward", tmp_path))
    made = _made(problem)
    name = kept.name_for(problem, problem.slot, 0, SMALL, "cpu")
    read = kept.load(name)
    assert read is not None and list(read) == list(made)
    assert len(_all(read)) == len(_all(made)) > 2
    assert all(_same(a, b) for a, b in zip(_all(read), _all(made), strict=True))


def test_the_next_process_judges_with_the_kept_runs_and_says_so(tmp_path: Path) -> None:
    problem_file = _copied_example("embedding_backward", tmp_path)
    problem = load_problem(problem_file)
    candidate = parse_candidate(f"{problem_file.parent / 'candidates.py'}::wide_accumulator")
    first = run_experiment(problem, candidate, 0, SMALL, "cpu", 600.0)
    assert first.reference_runs == "made by this audit"
    again = run_experiment(problem, candidate, 0, SMALL, "cpu", 600.0)
    assert again.reference_runs == "made by an earlier audit in this process"
    experiments._references.clear()  # as a new process starts
    experiments._origins.clear()
    later = run_experiment(problem, candidate, 0, SMALL, "cpu", 600.0)
    assert later.reference_runs.startswith("kept on disk by an earlier audit")
    assert later.judgements == first.judgements and later.conclusion == first.conclusion


def test_a_kept_set_changed_on_disk_is_not_read(tmp_path: Path) -> None:
    problem = load_problem(_copied_example("embedding_backward", tmp_path))
    _made(problem)
    name = kept.name_for(problem, problem.slot, 0, SMALL, "cpu")
    place = kept.folder() / name
    manifest_file = place / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    tensors = place / manifest["tensors"]
    assert kept.load(name) is not None

    original = tensors.read_bytes()
    loaded = torch.load(tensors, weights_only=True)
    losses = next(k for k in loaded if k.endswith("/reference/losses"))
    loaded[losses] = loaded[losses] * 0.5  # an envelope a wrong kernel would fit in
    torch.save(loaded, tensors)
    assert kept.load(name) is None
    tensors.write_bytes(original)
    assert kept.load(name) is not None

    forged = json.loads(manifest_file.read_text())
    forged["optimizers"]["sgd"]["perturbed"] = []  # an envelope of the reference alone
    manifest_file.write_text(json.dumps(forged))
    assert kept.load(name) is None
    del forged["seal"]
    manifest_file.write_text(json.dumps(forged))
    assert kept.load(name) is None


def test_a_set_is_named_by_what_its_runs_depend_on_and_not_by_a_candidate(
    tmp_path: Path,
) -> None:
    problem_file = _copied_example("embedding_backward", tmp_path)
    problem = load_problem(problem_file)
    name = kept.name_for(problem, problem.slot, 0, SMALL, "cpu")
    assert name
    # a candidate's file beside the problem's, changed: the same runs
    (problem_file.parent / "candidates.py").write_text("# another attempt\n")
    assert kept.name_for(problem, problem.slot, 0, SMALL, "cpu") == name
    assert kept.name_for(problem, problem.slot, 1, SMALL, "cpu") != name
    assert kept.name_for(problem, problem.slot, 0, replace(SMALL, steps=4), "cpu") != name
    assert kept.name_for(problem, problem.slot, 0, replace(SMALL, seed=1), "cpu") != name
    # the reference's file changed, even by a comment: made again
    problem_file.write_text(problem_file.read_text() + "\n# changed\n")
    assert kept.name_for(problem, problem.slot, 0, SMALL, "cpu") != name
    # a problem built in code has no file to name it by: nothing is kept for it
    assert kept.name_for(replace(problem, source=""), problem.slot, 0, SMALL, "cpu") == ""


def test_a_set_with_a_run_that_stopped_is_not_kept(tmp_path: Path) -> None:
    problem = load_problem(_copied_example("embedding_backward", tmp_path))
    name = kept.name_for(problem, problem.slot, 0, SMALL, "cpu")
    stopped = Trajectory("sgd", (1.0, float("nan")), error="CUDA out of memory")
    finished = Trajectory("sgd", (1.0, 0.9), {"w": torch.ones(2)})
    assert not kept.keep(name, {"sgd": (stopped, [finished], [])})
    assert kept.load(name) is None
    assert kept.keep(name, {"sgd": (finished, [finished], [Shadowed("sgd", {"w": torch.ones(2)})])})
    assert kept.load(name) is not None


def test_the_kept_sets_are_bounded_the_least_used_given_up_first(tmp_path: Path) -> None:
    problem = load_problem(_copied_example("embedding_backward", tmp_path))
    run = Trajectory("sgd", (1.0,), {"w": torch.zeros(1 << 16)})
    names = [kept.name_for(problem, problem.slot, 0, replace(SMALL, seed=s), "cpu") for s in (1, 2)]
    assert kept.keep(names[0], {"sgd": (run, [], [])})
    size = sum(p.stat().st_size for p in (kept.folder() / names[0]).iterdir())
    kept._bound(kept.folder(), 10 * size)
    assert kept.load(names[0]) is not None
    assert kept.keep(names[1], {"sgd": (run, [], [])})
    kept._bound(kept.folder(), size + size // 2)
    assert kept.load(names[0]) is None and kept.load(names[1]) is not None
