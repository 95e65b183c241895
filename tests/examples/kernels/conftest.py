"""Fixtures for testing the bundled examples' kernels directly, without the audit engine.

These tests run on a CUDA GPU, or on the CPU through Triton's interpreter. The interpreter needs
TRITON_INTERPRET=1 before triton is first imported, so without a GPU they run only in a process
started that way: `tests/examples/test_kernels_interpreted.py` starts one.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import torch

from kernelaudit import Problem
from kernelaudit.problem.load import load_problem

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
RUNNABLE = DEVICE == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def worst_row_error(result: torch.Tensor, truth: torch.Tensor) -> float:
    """max over rows of ||result_r - truth_r|| / max(||truth_r||, rms row norm), over positions
    where both are finite (`Run.same_nonfinite` judges the others)."""
    result = result.double().reshape(truth.shape[0], -1)
    truth = truth.reshape(truth.shape[0], -1)
    finite = torch.isfinite(result) & torch.isfinite(truth)
    difference = torch.where(finite, result - truth, 0.0)
    truth = torch.where(finite, truth, 0.0)
    row_norms = truth.norm(dim=1)
    rms_row = float(row_norms.norm()) / math.sqrt(row_norms.numel())
    denominator = torch.clamp(row_norms, min=max(rms_row, torch.finfo(torch.float64).tiny))
    return float((difference.norm(dim=1) / denominator).max())


@dataclass(frozen=True)
class Run:
    """One candidate call next to the fp64 truth and the baseline (the reference run at the
    inputs' own dtype)."""

    result: torch.Tensor
    truth: torch.Tensor
    baseline: torch.Tensor

    @property
    def error(self) -> float:
        return worst_row_error(self.result, self.truth)

    @property
    def baseline_error(self) -> float:
        return worst_row_error(self.baseline, self.truth)

    @property
    def budget(self) -> float:
        """Three times the baseline's error or a noise floor, whichever is more: sound summation
        orders differ by up to ~3x, lost precision costs 10x and more. The floor is two
        roundings of the output's dtype, or the reordering noise of a long fp32 accumulation."""
        floor = max(torch.finfo(self.baseline.dtype).eps, 8 * torch.finfo(torch.float32).eps)
        return 3 * max(self.baseline_error, floor)

    @property
    def same_nonfinite(self) -> bool:
        """NaN exactly where the truth has NaN, and the same infinities."""
        result, truth = self.result.double(), self.truth
        return (
            torch.equal(result.isnan(), truth.isnan())
            and torch.equal(result.isposinf(), truth.isposinf())
            and torch.equal(result.isneginf(), truth.isneginf())
        )

    @property
    def correct(self) -> bool:
        return self.same_nonfinite and self.error <= self.budget

    def describe(self) -> str:
        return (
            f"error {self.error:.3g} (budget {self.budget:.3g}, baseline "
            f"{self.baseline_error:.3g}); NaN/inf as the truth: {self.same_nonfinite}"
        )


def _fp64(value: object) -> object:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.double()
    return value


@dataclass(frozen=True)
class Example:
    folder: Path
    problem: Problem
    candidates: ModuleType

    def run(self, candidate: str, *inputs: object) -> Run:
        """Call `candidate` and the reference on the same inputs."""
        truth = self.problem.reference(*(_fp64(x) for x in inputs))
        # The baseline stays alive while the candidate runs, so an output the candidate leaves
        # unwritten cannot inherit the right values from a freed buffer of the reference's.
        baseline = self.problem.reference(*inputs)
        result = getattr(self.candidates, candidate)(*inputs)
        assert result.shape == truth.shape, f"{candidate} returned shape {tuple(result.shape)}"
        assert result.dtype == baseline.dtype, f"{candidate} returned {result.dtype}"
        return Run(result, truth, baseline)


def _import_candidates(folder: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"example_{folder.name}_candidates", folder / "candidates.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def example() -> Callable[[str], Example]:
    """`example(name)`: `examples/<name>/`, loaded once per session; its problem goes through
    the native loader, so it is validated too."""
    loaded: dict[str, Example] = {}

    def load(name: str) -> Example:
        if name not in loaded:
            folder = EXAMPLES / name
            problem = load_problem(folder / "problem.py")
            loaded[name] = Example(folder, problem, _import_candidates(folder))
        return loaded[name]

    return load


@pytest.fixture
def device() -> str:
    return DEVICE


@pytest.fixture(autouse=True)
def _kernels_can_run() -> None:
    if not RUNNABLE:
        pytest.skip("no GPU: these run under TRITON_INTERPRET=1 in test_kernels_interpreted.py")
