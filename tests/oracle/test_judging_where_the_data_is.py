"""The comparison runs where it is told to (on the GPU when there is one), gives the same
verdict and figures as on the host, and computes the baseline's side once per case."""

from collections.abc import Callable

import pytest
import torch

from kernelaudit.oracle import compare as compare_module
from kernelaudit.oracle.compare import compare, judging_device

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _case(dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    truth = torch.randn(300, 257, dtype=torch.float64) * 3 + 1
    truth[7, :5] = float("nan")
    truth[9, 3] = float("inf")
    baseline = truth.to(dtype)
    return truth, baseline, truth.to(dtype)


def _lossy(values: torch.Tensor) -> torch.Tensor:
    lossy = values.clone()
    lossy[100:104] = lossy[100:104].to(torch.bfloat16).to(values.dtype) * 1.01
    return lossy


def test_the_baseline_is_judged_once_per_case_and_reused():
    truth, baseline, good = _case(torch.float32)
    memo: compare_module.Memo = {}
    first = compare("y", good, truth, baseline, torch.float32, memo=memo)
    assert set(memo) == {"y"}
    kept = memo["y"]
    second = compare("y", _lossy(good), truth, baseline, torch.float32, memo=memo)
    assert memo["y"] is kept
    assert first.passed and not second.passed
    # the figures are those of a comparison that computes everything afresh
    fresh = compare("y", _lossy(good), truth, baseline, torch.float32)
    assert second.metrics == fresh.metrics and second.reason == fresh.reason


def test_results_are_judged_on_the_host_without_a_gpu_device():
    assert judging_device("cpu") == torch.device("cpu")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_judging_on_the_gpu_gives_the_host_verdict_and_figures(dtype):
    truth, baseline, good = _case(dtype, seed=1)
    assert judging_device("cuda:0").type == "cuda"
    for values in (good, _lossy(good), torch.zeros_like(good)):
        on_host = compare("y", values, truth, baseline, dtype)
        on_gpu = compare("y", values, truth, baseline, dtype, device="cuda")
        assert (on_gpu.passed, on_gpu.failure) == (on_host.passed, on_host.failure)
        assert on_gpu.worst_row == on_host.worst_row
        assert on_gpu.worst_element == on_host.worst_element
        for (name, a), (_, b) in zip(on_gpu.metrics, on_host.metrics, strict=True):
            assert a == pytest.approx(b, rel=1e-9, abs=1e-300), name


_LARGE = """
import resource, sys, torch
from kernelaudit.oracle.compare import compare
rows = int(sys.argv[1])
# a truth bfloat16 holds exactly, which its baseline reproduces: the bit-exact rule applies
truth = torch.randn(rows, 1024, dtype=torch.float64).to(torch.bfloat16).to(torch.float64)
baseline = truth.to(torch.bfloat16)
wrong = baseline.clone()
wrong.view(torch.int16)[-1, -1] += 1  # one element one unit off, in the last chunk
same = baseline.clone()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
verdicts = [compare("y", v, truth, baseline, torch.bfloat16) for v in (same, wrong)]
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(verdicts[0].passed, verdicts[1].failure, dict(verdicts[1].metrics)["bit_exact_mismatches"])
print(grown)
"""


def test_a_large_result_is_judged_without_float64_copies_of_it_whole(
    host_memory_run: Callable[..., list[str]],
) -> None:
    """Judging a result of 2**27 bfloat16 elements (its truth 1 GiB in float64) grows the
    judging process by less than half of one float64 copy of it: the candidate and the
    baseline are widened a chunk at a time. Whole float64 copies of a video patch embedding's
    results (5.3 G elements) had the auditor killed for memory."""
    rows = 1 << 17
    verdicts, grown = host_memory_run(_LARGE, str(rows))
    assert verdicts == "True bit-exact 1"
    assert int(grown) < rows * 1024 * 8 // 2


@pytest.mark.gpu
@needs_gpu
def test_a_large_result_is_judged_on_the_gpu_without_float64_copies_of_it_whole():
    """On the GPU, judging a result of 2**27 bfloat16 elements takes its float64 truth (1 GiB),
    the result and the baseline at their own dtype, and less than half a float64 copy more."""
    truth = torch.randn(1 << 17, 1024, dtype=torch.float64).to(torch.bfloat16).double()
    baseline = truth.to(torch.bfloat16)
    wrong = baseline.clone()
    wrong.view(torch.int16)[-1, -1] += 1
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    passed = compare("y", baseline.clone(), truth, baseline, torch.bfloat16, device="cuda")
    failed = compare("y", wrong, truth, baseline, torch.bfloat16, device="cuda")
    grown = torch.cuda.max_memory_allocated() - before
    assert passed.passed and failed.failure == "bit-exact"
    assert grown < truth.nbytes + 2 * baseline.nbytes + truth.nbytes // 2


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_float8_results_are_judged_at_their_own_dtype(dtype: torch.dtype) -> None:
    """A float8 result is judged like any other: its baseline's exact values pass bit for bit,
    one unit off fails the bit-exact rule, and a NaN where the truth is finite fails the
    non-finite pattern (whose tests float8 lacks: it crashed the comparison before)."""
    truth = (torch.randn(64, 33, dtype=torch.float64) * 4).to(dtype).double()
    baseline = truth.to(dtype)
    assert compare("y", baseline.clone(), truth, baseline, dtype).passed
    off = baseline.clone()
    off.view(torch.uint8)[5, 7] ^= 1  # the last bit of one element
    assert compare("y", off, truth, baseline, dtype).failure == "bit-exact"
    holed = baseline.clone()
    holed[3, 4] = float("nan")
    failed = compare("y", holed, truth, baseline, dtype)
    assert failed.failure == "nan-where-finite"
    assert failed.mismatches[0].index == (3, 4)
