"""Results come back to the host as plain contiguous copies of the same values; from a GPU, a
large one comes back page-locked (copied at the bus's speed), a small one pageable, and the
page-locked blocks the process keeps stay within a share of the host's memory."""

import gc

import pytest
import torch

from kernelaudit import host_copies
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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_page_locked_blocks_stay_within_their_share_of_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a 128 GiB host's share, scaled down: blocks of 64 MiB at most
    monkeypatch.setattr(host_copies, "pinned_most_bytes", lambda: 64 << 20)
    gc.collect()
    host_copies.release()
    within = torch.randn(10 << 20, device="cuda")  # 40 MiB: its block of 64 MiB fits
    past = torch.randn(20 << 20, device="cuda")  # 80 MiB: a block of 128 MiB does not
    within_copy = host_copy(within)
    assert within_copy.is_pinned()
    past_copy = host_copy(past)
    assert not past_copy.is_pinned()
    assert torch.equal(past_copy, past.cpu()) and torch.equal(within_copy, within.cpu())
    # with the first still in use, a second block of 64 MiB would take the allocator past
    # its share: pageable, however many blocks it keeps unused
    assert not host_copy(within).is_pinned()
    del within_copy
    gc.collect()
    assert host_copy(within).is_pinned()  # the first's block given back or handed out again


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_large_pageable_copy_from_a_gpu_goes_through_the_staging_buffers_intact(
    monkeypatch: pytest.MonkeyPatch, staged_copies: list[int]
) -> None:
    # the sizes scaled down: staged from 1 MiB, through buffers of 256 KiB, so a copy of
    # 2.3 MiB takes ten turns of the two buffers and ends on a part-filled one
    monkeypatch.setattr(host_copies, "STAGED_LEAST_BYTES", 1 << 20)
    monkeypatch.setattr(host_copies, "_STAGE_BYTES", 256 << 10)
    monkeypatch.setattr(host_copies, "_stages", {})
    value = torch.randn(3, 100_003, dtype=torch.float64, device="cuda")  # 2.3 MiB
    copy = host_copy(value, page_locked=False)
    assert staged_copies == [value.numel()]
    assert not copy.is_pinned() and copy.shape == value.shape and copy.dtype == value.dtype
    assert torch.equal(copy, value.cpu())
    # another dtype, a small tensor: the device's own copy
    assert torch.equal(host_copy(value, torch.float32, page_locked=False), value.float().cpu())
    assert torch.equal(host_copy(value[:, :10], page_locked=False), value[:, :10].cpu())
    assert staged_copies == [value.numel()]
    # a large one laid out otherwise (a transposed result): made contiguous on the device,
    # then staged, not copied into pageable memory page by page
    transposed = host_copy(value.t(), page_locked=False)
    assert transposed.is_contiguous() and torch.equal(transposed, value.t().cpu())
    assert staged_copies == [value.numel(), value.numel()]
    # integers and booleans come through bit for bit too
    flags = torch.rand(5 << 20, device="cuda") > 0.5
    assert torch.equal(host_copy(flags, page_locked=False), flags.cpu())
    assert staged_copies == [value.numel(), value.numel(), flags.numel()]
