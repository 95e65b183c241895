"""Results come back to the host as plain contiguous copies of the same values; from a GPU, a
large one comes back page-locked (copied at the bus's speed), a small one pageable."""

import pytest
import torch

from kernelaudit.host_copies import PINNED_LEAST_BYTES, host_copy


def test_a_copy_is_contiguous_detached_and_holds_the_same_values() -> None:
    base = torch.arange(24.0, requires_grad=True)
    value = (base * 2).reshape(4, 6).t()  # a transposed view with autograd history
    copy = host_copy(value, torch.float64)
    assert copy.is_contiguous() and not copy.requires_grad
    assert copy.dtype == torch.float64 and copy.shape == (6, 4)
    assert torch.equal(copy, value.detach().double())
    assert not copy.is_pinned()  # no GPU in use here: plain memory


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_from_a_gpu_a_large_copy_is_page_locked_and_a_small_one_is_not() -> None:
    large = torch.randn(PINNED_LEAST_BYTES // 4, device="cuda")
    small = torch.randn(16, device="cuda")
    large_copy, small_copy = host_copy(large), host_copy(small)
    assert large_copy.device.type == small_copy.device.type == "cpu"
    assert large_copy.is_pinned() and not small_copy.is_pinned()
    assert not host_copy(large, page_locked=False).is_pinned()  # the worker's own copies
    assert torch.equal(large_copy, large.cpu()) and torch.equal(small_copy, small.cpu())
