"""`kernelaudit.guard`: a kernel checked against its reference on a sample of its real calls."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import pytest
import torch

import kernelaudit
from kernelaudit.guarding import GuardFailure, GuardWarning

from .fixtures import kernels


def _calls(fast: kernelaudit.Guard, count: int, numel: int = 1000, device: str = "cpu") -> None:
    generator = torch.Generator().manual_seed(0)
    for _ in range(count):
        fast(torch.randn(numel, generator=generator).to(device))


def test_a_right_kernel_passes_every_checked_call(tmp_path: Path) -> None:
    fast = kernelaudit.guard(kernels.scale_right, kernels.scale, sample=0.25, records=tmp_path)
    _calls(fast, 60)
    summary = fast.flush()
    assert (summary.calls, summary.failed) == (60, 0)
    assert 8 <= summary.checked < 60  # the first eight, then about a quarter
    fast.close()
    written = json.loads((tmp_path / "scale_right-summary.json").read_text())
    assert written["calls"] == 60 and written["failed"] == 0
    assert not list(tmp_path.glob("*-call*.json"))


def test_a_kernel_wrong_only_after_many_calls_is_caught_once_it_turns(tmp_path: Path) -> None:
    # checked as each call is made (in the background, the calls after a failure are all
    # checked from the moment its check ends)
    fast = kernelaudit.guard(
        kernels.scale_wrong_after_40_calls,
        kernels.scale,
        sample=0.1,
        first=4,
        records=tmp_path,
        background=False,
    )
    _calls(fast, 120)
    summary = fast.flush()
    assert summary.failed >= 1
    first = min(f.verdict.call for f in summary.failures)
    assert first > 40
    # after a failure, the calls that follow are all checked
    failing = sorted(f.verdict.call for f in summary.failures)
    assert failing[:5] == list(range(first, first + 5))
    (output,) = summary.failures[0].verdict.outputs
    assert not output.passed and output.failure == "error"


def test_a_size_no_earlier_call_had_is_always_checked(tmp_path: Path, device: str) -> None:
    """On a GPU the checks run on the guard's own stream and thread, away from the job's."""
    fast = kernelaudit.guard(
        kernels.scale_wrong_past_4096, kernels.scale, sample=0.0, first=2, records=tmp_path
    )
    _calls(fast, 50, numel=1024, device=device)
    big = torch.randn(8192, device=device)
    assert torch.equal(fast(big), kernels.scale_wrong_past_4096(big))  # returned as it is
    summary = fast.flush()
    assert summary.checked == 3  # the first two, and the new size
    (failure,) = summary.failures
    assert failure.verdict.call == 51 and failure.verdict.why == "a shape or dtype not seen before"
    assert Path(failure.record).is_file()


def test_the_reference_sees_inputs_as_they_were_before_the_call() -> None:
    fast = kernelaudit.guard(kernels.scale_writes_its_input, kernels.scale, sample=1.0)
    _calls(fast, 10)
    assert fast.flush().failed == 0


def test_on_failure_raises_at_the_failing_call_warns_or_calls_back() -> None:
    big = torch.randn(8192)
    raising = kernelaudit.guard(kernels.scale_wrong_past_4096, kernels.scale, on_failure="raise")
    raising(torch.randn(16))
    with pytest.raises(GuardFailure, match="call 2"):
        raising(big)
    warning = kernelaudit.guard(kernels.scale_wrong_past_4096, kernels.scale, on_failure="warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warning(big)
        warning.flush()
    assert any(issubclass(w.category, GuardWarning) for w in caught)
    seen: list[int] = []
    calling = kernelaudit.guard(
        kernels.scale_wrong_past_4096,
        kernels.scale,
        on_failure=lambda failure: seen.append(failure.verdict.call),
    )
    calling(big)
    calling.flush()
    assert seen == [1]
    with pytest.raises(ValueError, match="on_failure is one of"):
        kernelaudit.guard(kernels.scale_right, kernels.scale, on_failure="email")


def test_an_embedding_gradient_summed_in_fp16_fails_in_its_hottest_rows() -> None:
    generator = torch.Generator().manual_seed(1)
    vocab, tokens = 64, 4096
    # a Zipf-like stream: id 0 takes half the tokens
    ids = torch.where(
        torch.rand(tokens, generator=generator) < 0.5,
        torch.zeros(tokens, dtype=torch.long),
        torch.randint(0, vocab, (tokens,), generator=generator),
    )
    grad = torch.rand(tokens, 8, generator=generator).to(torch.float16)
    right, wrong = kernels.embedding_backward, kernels.embedding_backward_fp16_sums
    for kernel, failed in ((right, 0), (wrong, 1)):
        fast = kernelaudit.guard(kernel, kernels.embedding_backward, sample=1.0)
        fast(grad, ids, vocab)
        summary = fast.flush()
        assert summary.failed == failed
    (failure,) = summary.failures
    (output,) = failure.verdict.outputs
    assert output.worst_row == 0
    # the worst row's id, counted among the call's ids
    assert failure.occurrences == (("argument 1", 0, int((ids == 0).sum())),)
    assert "row 0" in summary.describe()


def test_a_guard_over_a_problem_judges_with_its_outputs_names() -> None:
    problem = kernelaudit.Problem(
        name="scale",
        reference=kernels.scale,
        axes=(kernelaudit.Axis("n"),),
        inputs=(kernelaudit.TensorInput("x", ("n",)),),
        outputs=(kernelaudit.Output("y", ("n",)),),
        workloads=({"n": 16},),
    )
    fast = kernelaudit.guard(kernels.scale_wrong_past_4096, problem, sample=1.0)
    fast(torch.randn(8192))
    (failure,) = fast.flush().failures
    assert failure.verdict.outputs[0].name == "y"


def _slow_scale(x: torch.Tensor) -> torch.Tensor:
    time.sleep(0.05)
    return x * 2


def test_checks_that_fall_behind_hold_a_bounded_number_of_copies() -> None:
    fast = kernelaudit.guard(kernels.scale_right, _slow_scale, sample=1.0)
    _calls(fast, 40)
    summary = fast.flush()
    assert summary.behind > 0
    assert summary.checked + summary.behind == 40
    assert "not checked while checks were behind" in summary.describe()
    # how far behind the calls the verdicts came, and the slowest check, are in the summary
    assert summary.to_json()["latest"] >= 8
    assert summary.to_json()["slowest_s"] >= 0.05


def test_checks_in_the_foreground_give_each_verdict_before_the_next_call() -> None:
    fast = kernelaudit.guard(kernels.scale_right, _slow_scale, sample=1.0, background=False)
    _calls(fast, 3)
    assert fast.flush().to_json()["latest"] == 0


def test_a_callback_that_raises_does_not_stop_the_checks(caplog: pytest.LogCaptureFixture) -> None:
    def broken(failure: object) -> None:
        raise RuntimeError("the pager is down")

    fast = kernelaudit.guard(kernels.scale_wrong_past_4096, kernels.scale, on_failure=broken)
    fast(torch.randn(8192))
    fast(torch.randn(8192))
    summary = fast.flush()  # returns: the checking thread lives on
    assert summary.failed == 2
    assert "checking call 1 failed" in caplog.text
