"""The comparison runs where it is told to (on the GPU when there is one), gives the same
verdict and figures as on the host, and computes the baseline's side once per case."""

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
