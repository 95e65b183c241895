"""The hostile corpus, audited: every hack fails the check it games, every control passes every
check, and one hostile candidate cannot change the verdict of the one audited after it.

A hack is audited with only the check it games (execution always runs): that check alone must
catch it. Nothing here imports a submission; each one runs in an auditor's worker process.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from corpus import ANY, CORPUS, Submission

from kernelaudit.checks import REGISTRY
from kernelaudit.demo import find_examples, load_examples
from kernelaudit.engine.audit import audit, audit_in_turn
from kernelaudit.findings import AuditReport
from kernelaudit.problem.load import load_problem
from kernelaudit.problem.spec import Problem
from kernelaudit.profiles import PROFILES
from kernelaudit.runner.candidate import parse_candidate

HERE = Path(__file__).parent

PROFILE = replace(
    PROFILES["quick"],
    float_distributions=("normal",),
    boundary_sizes_per_axis=1,
    layouts=(),
    seeds=1,
    repeats=2,
    shrink_budget=2,
    timeout_s=10.0,
    host_memory_bytes=2 << 30,
)
"""Small enough that the whole corpus runs in a few minutes on two CPU cores."""

WORKLOAD_ONLY = replace(PROFILE, boundary_sizes_per_axis=0, shrink_budget=0)
"""For candidates that end their worker: each probe, and each shrinking step, costs a restart or
a whole timeout, and the workload alone shows the failure."""

NEVER_FAILING = {"weak-cases", "tripwires"}
"""Checks whose findings are notes or warnings only: no hack can be expected to fail them."""

NOT_FOR_LINEAR = {"gradients", "training"}
"""Checks that judge only backward problems or problems with a training slot, which the
corpus's linear problems are not: the bundled examples must fail them instead."""

DEFECTS = {
    "triton-bounds",
    "sanitizer",
    "races",
    "autotune",
    "memory",
    "batch-invariance",
    "large-tensors",
}
"""Checks for defects of memory safety, concurrency and invariance rather than for gaming: the
defective kernels that fail them sit beside their own tests (tests/interpret, tests/sanitizer,
tests/checks)."""


@functools.cache
def _problem(stem: str) -> Problem:
    return load_problem(HERE / "problems" / f"{stem}.py")


def _spec(submission: Submission) -> str:
    return f"{HERE / submission.file}::candidate"


def _listing(report: AuditReport) -> list[str]:
    return [f"{f.check} {f.severity}: {f.title}" for f in report.findings]


def _params() -> list[object]:
    on_gpu = (
        pytest.mark.gpu,
        pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    )
    return [
        pytest.param(
            s,
            device,
            id=f"{Path(s.file).stem}-{device}",
            marks=(pytest.mark.slow, *(on_gpu if device == "cuda" else ())),
        )
        for s in CORPUS
        for device in s.devices
    ]


def test_the_manifest_names_every_file_once_with_a_check_that_exists() -> None:
    listed = [s.file for s in CORPUS]
    on_disk = sorted(
        path.relative_to(HERE).as_posix()
        for folder in ("hacks", "controls")
        for path in (HERE / folder).glob("*.py")
    )
    assert sorted(listed) == on_disk
    checks = {cls.name for cls in REGISTRY}
    for s in CORPUS:
        assert s.problem in ("linear", "linear_into"), s
        assert s.devices and set(s.devices) <= set(ANY), s
        assert (s.expect is None) == s.file.startswith("controls/"), s
        assert s.expect is None or s.expect in checks, f"{s.file}: no check named {s.expect!r}"
    uncaught = checks - NEVER_FAILING - NOT_FOR_LINEAR - DEFECTS - {s.expect for s in CORPUS}
    assert not uncaught, f"checks with no hack in the corpus: {sorted(uncaught)}"
    examples = load_examples(find_examples())
    failed_by_examples = {c for e in examples if e.verdict == "FAIL" for c in e.checks}
    assert checks >= NOT_FOR_LINEAR | DEFECTS
    assert failed_by_examples >= NOT_FOR_LINEAR, "a bundled example must fail each of them"


@pytest.mark.parametrize("submission", CORPUS, ids=lambda s: Path(s.file).stem)
def test_every_submission_says_what_it_does_and_defines_candidate(submission: Submission) -> None:
    # parsed, never imported: a hack patches whatever process imports it
    tree = ast.parse((HERE / submission.file).read_text())
    assert ast.get_docstring(tree), f"{submission.file} has no module docstring"
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert "candidate" in functions


@pytest.mark.parametrize(("submission", "device"), _params())
def test_a_hack_fails_the_check_it_games_and_a_control_passes(
    submission: Submission, device: str
) -> None:
    checks = None if submission.expect is None else [submission.expect]
    profile = WORKLOAD_ONLY if submission.expect == "execution" else PROFILE
    report = audit(_problem(submission.problem), _spec(submission), profile, device, checks)
    if submission.expect is None:
        assert report.verdict == "PASS", _listing(report)
        return
    assert report.verdict == "FAIL", _listing(report)
    caught = [f for f in report.findings if f.check == submission.expect and f.severity == "fail"]
    assert caught, _listing(report)


@pytest.mark.slow
def test_a_hostile_candidate_cannot_change_the_next_candidates_verdict() -> None:
    linear = _problem("linear")
    jobs = [
        (linear, parse_candidate(f"{HERE / 'hacks' / 'sigkill.py'}::candidate")),
        (linear, parse_candidate(f"{HERE / 'controls' / 'empty_then_fill.py'}::candidate")),
    ]
    # numerics is where a result corrupted from outside would show
    hostile, honest = audit_in_turn(jobs, WORKLOAD_ONLY, "cpu", ["execution", "numerics"])
    assert hostile.verdict == "FAIL", _listing(hostile)
    assert any(f.check == "execution" and f.severity == "fail" for f in hostile.findings)
    assert honest.verdict == "PASS", _listing(honest)
