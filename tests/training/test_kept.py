"""The reference's training runs kept on disk: read back as made, by the next process too; never
read once changed; named by what they depend on, and by nothing a candidate writes."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
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


TOKENS = batches(token_stream(64, 4096, 0), 4, 8, SMALL.steps, 0)


def _name(
    problem: Problem, config: int = 0, experiment: Experiment = SMALL, tokens: torch.Tensor = TOKENS
) -> str:
    return kept.name_for(problem, config, slot_dtypes(problem, config), experiment, tokens, "cpu")


def _made(problem: Problem, config: int = 0) -> dict[str, kept.Envelope]:
    dtypes = slot_dtypes(problem, config)
    runs = _reference_runs(problem, config, dtypes, SMALL, TOKENS, "cpu")
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
    read = kept.load(_name(problem))
    assert read is not None and list(read) == list(made)
    assert len(_all(read)) == len(_all(made)) > 2
    assert all(_same(a, b) for a, b in zip(_all(read), _all(made), strict=True))


def test_the_next_audit_judges_with_the_kept_runs_and_says_where_they_came_from(
    tmp_path: Path,
) -> None:
    problem_file = _copied_example("embedding_backward", tmp_path)
    problem = load_problem(problem_file)
    candidate = parse_candidate(f"{problem_file.parent / 'candidates.py'}::wide_accumulator")
    first = run_experiment(problem, candidate, 0, SMALL, "cpu", 600.0)
    assert first.reference_runs.startswith("made by this audit, kept for the next")
    again = run_experiment(problem, candidate, 0, SMALL, "cpu", 600.0)
    assert again.reference_runs == "made by an earlier audit in this process"
    experiments._references.clear()  # as a new process starts
    experiments._origins.clear()
    later = run_experiment(problem, candidate, 0, SMALL, "cpu", 600.0)
    assert later.reference_runs.startswith("kept on disk by an earlier audit")
    assert str(kept.folder()) in later.reference_runs  # where to delete them
    assert later.judgements == first.judgements and later.conclusion == first.conclusion


def test_another_process_names_the_set_alike(tmp_path: Path) -> None:
    problem_file = _copied_example("embedding_backward", tmp_path)
    here = _name(load_problem(problem_file))
    script = (
        "import sys\n"
        "from kernelaudit.problem.load import load_problem\n"
        "from kernelaudit.training.data import batches, token_stream\n"
        "from kernelaudit.training.experiment import slot_dtypes\n"
        "from kernelaudit.training.kept import name_for\n"
        "from kernelaudit.training.loop import Experiment\n"
        "from kernelaudit.training.model import ModelConfig\n"
        "problem = load_problem(sys.argv[1])\n"
        "experiment = Experiment(ModelConfig(vocab=64, hidden=16, layers=1, heads=2, seq=8, "
        "mlp_hidden=32), steps=3, batch=4)\n"
        "tokens = batches(token_stream(64, 4096, 0), 4, 8, 3, 0)\n"
        "print(name_for(problem, 0, slot_dtypes(problem, 0), experiment, tokens, 'cpu'))\n"
    )
    there = subprocess.run(
        [sys.executable, "-c", script, str(problem_file)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert here and there == here


def test_a_kept_set_changed_on_disk_is_not_read(tmp_path: Path) -> None:
    problem = load_problem(_copied_example("embedding_backward", tmp_path))
    _made(problem)
    name = _name(problem)
    place = kept.folder() / name
    manifest_file = place / kept.MANIFEST
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

    original_manifest = manifest_file.read_text()
    forged = json.loads(original_manifest)
    forged["optimizers"]["sgd"]["perturbed"] = []  # an envelope of the reference alone
    manifest_file.write_text(json.dumps(forged))
    assert kept.load(name) is None
    del forged["seal"]
    manifest_file.write_text(json.dumps(forged))
    assert kept.load(name) is None
    manifest_file.write_text("[1, 2, 3]")  # not a set at all
    assert kept.load(name) is None

    # a sealed set copied over another's: read for neither
    other = _name(problem, experiment=replace(SMALL, seed=1))
    (kept.folder() / other).mkdir(parents=True)
    shutil.copy(tensors, (kept.folder() / other) / tensors.name)
    ((kept.folder() / other) / kept.MANIFEST).write_text(original_manifest)
    assert kept.load(other) is None


def test_a_set_is_named_by_what_its_runs_depend_on_and_not_by_a_candidate(
    tmp_path: Path,
) -> None:
    problem_file = _copied_example("embedding_backward", tmp_path)
    problem = load_problem(problem_file)
    name = _name(problem)
    assert name
    # a candidate's file beside the problem's, changed and loaded again: the same runs
    (problem_file.parent / "candidates.py").write_text("# another attempt\n")
    assert _name(load_problem(problem_file)) == name
    assert _name(problem, config=1) != name
    assert _name(problem, experiment=replace(SMALL, steps=4)) != name
    assert _name(problem, experiment=replace(SMALL, seed=1)) != name
    assert _name(problem, tokens=TOKENS.flip(0)) != name
    # the reference's file changed, even by a comment: the problem as it was loaded no longer
    # says what its file holds, so nothing is kept for it; loaded again, it names other runs
    problem_file.write_text(problem_file.read_text() + "\n# changed\n")
    assert _name(problem) == ""
    assert _name(load_problem(problem_file)) not in ("", name)
    # a problem built in code has no file to name it by: nothing is kept for it
    assert _name(replace(problem, source="", source_files=())) == ""


def test_a_helper_the_reference_imports_is_part_of_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem_file = _copied_example("embedding_backward", tmp_path)
    helper = problem_file.parent / "scaling_for_kept_runs.py"
    helper.write_text("SCALE = 1.0\n")
    with problem_file.open("a") as source:
        source.write("\nimport scaling_for_kept_runs  # noqa: E402, F401\n")
    try:
        name = _name(load_problem(problem_file))
        helper.write_text("SCALE = 2.0\n")
        # still imported as it was: the process runs the old helper, and keeps nothing
        assert _name(load_problem(problem_file)) == ""
        sys.modules.pop("scaling_for_kept_runs", None)  # imported afresh: other runs
        problem = load_problem(problem_file)
        again = _name(problem)
        assert again not in ("", name)
        # a helper the reference imports only when it runs counts once it is imported
        (problem_file.parent / "imported_late_for_kept_runs.py").write_text("LATE = 1\n")
        monkeypatch.syspath_prepend(str(problem_file.parent))
        importlib.import_module("imported_late_for_kept_runs")
        assert _name(problem) not in ("", again)
    finally:
        sys.modules.pop("scaling_for_kept_runs", None)
        sys.modules.pop("imported_late_for_kept_runs", None)


def test_nothing_is_kept_by_a_process_whose_code_changed_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kernelaudit

    problem = load_problem(_copied_example("embedding_backward", tmp_path))
    assert _name(problem)
    monkeypatch.setattr(kernelaudit, "IMPORTED_AT", 0.0)  # every source file newer than that
    assert _name(problem) == ""


def test_a_set_that_cannot_be_kept_says_why_and_the_audit_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem_file = _copied_example("embedding_backward", tmp_path)
    problem = load_problem(problem_file)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("KERNELAUDIT_CACHE", str(blocker))  # the cache cannot be made
    candidate = parse_candidate(f"{problem_file.parent / 'candidates.py'}::wide_accumulator")
    outcome = run_experiment(problem, candidate, 0, SMALL, "cpu", 600.0)
    assert outcome.judgements and not outcome.error
    assert outcome.reference_runs.startswith("made by this audit (not kept: the cache could not")


def test_a_set_with_a_run_that_stopped_is_not_kept(tmp_path: Path) -> None:
    problem = load_problem(_copied_example("embedding_backward", tmp_path))
    name = _name(problem)
    stopped = Trajectory("sgd", (1.0, float("nan")), error="CUDA out of memory")
    finished = Trajectory("sgd", (1.0, 0.9), {"w": torch.ones(2)})
    assert kept.keep(name, {"sgd": (stopped, [finished], [])}) != ""
    assert kept.load(name) is None
    shadow = Shadowed("sgd", {"w": torch.ones(2)})
    assert kept.keep(name, {"sgd": (finished, [finished], [shadow])}) == ""
    assert kept.load(name) is not None


def test_the_kept_sets_are_bounded_the_least_used_given_up_first(tmp_path: Path) -> None:
    problem = load_problem(_copied_example("embedding_backward", tmp_path))
    run = Trajectory("sgd", (1.0,), {"w": torch.zeros(1 << 16)})
    names = [_name(problem, experiment=replace(SMALL, seed=s)) for s in (1, 2)]
    for name in names:
        assert kept.keep(name, {"sgd": (run, [], [])}) == ""
    size = sum(p.stat().st_size for p in (kept.folder() / names[0]).iterdir())
    # the first used more lately than the second
    os.utime((kept.folder() / names[1]) / kept.MANIFEST, (1_000_000, 1_000_000))
    os.utime((kept.folder() / names[0]) / kept.MANIFEST, (2_000_000, 2_000_000))
    kept._bound(kept.folder(), 10 * size)
    assert all(kept.load(name) is not None for name in names)
    os.utime((kept.folder() / names[1]) / kept.MANIFEST, (1_000_000, 1_000_000))
    os.utime((kept.folder() / names[0]) / kept.MANIFEST, (2_000_000, 2_000_000))
    kept._bound(kept.folder(), size + size // 2)
    assert kept.load(names[1]) is None and kept.load(names[0]) is not None
