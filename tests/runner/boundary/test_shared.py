"""Shared memory regions between the auditor and a candidate's process: tensors placed and
taken back whole, places outside the region refused, and the region kept from shrinking."""

from __future__ import annotations

import os

import pytest
import torch

from kernelaudit.runner.boundary import shared
from kernelaudit.runner.boundary.shared import Region, SharedTensor

pytestmark = pytest.mark.skipif(not shared.available(), reason="needs memfd_create and seals")


def test_tensors_placed_in_a_region_come_back_equal_and_as_copies_of_their_own() -> None:
    region = Region.create("test")
    tensors = [torch.randn(3, 5), torch.arange(7, dtype=torch.int64), torch.ones(2, 2).half()]
    region.grow(sum(shared.room(t.dtype, tuple(t.shape)) for t in tensors))
    places = region.put(tensors)
    assert places is not None
    taken = [region.take(place, "cpu") for place in places]
    for before, after in zip(tensors, taken, strict=True):
        assert after.dtype == before.dtype and torch.equal(after, before)
    # the region's bytes change under the taken copies without reaching them
    region.put([torch.zeros(3, 5)])
    assert torch.equal(taken[0], tensors[0])
    region.close()


def test_tensors_that_do_not_fit_are_not_placed() -> None:
    region = Region.create("test")
    region.grow(64)
    assert region.put([torch.zeros(region.size // 4 + 1)]) is None
    region.close()


@pytest.mark.parametrize(
    "place",
    [
        SharedTensor(1 << 40, "float32", (4,)),  # past the end
        SharedTensor(3, "float32", (4,)),  # not aligned
        SharedTensor(-64, "float32", (4,)),
        SharedTensor(0, "not_a_dtype", (4,)),
        SharedTensor(0, "float32", (-1,)),
        SharedTensor(0, "float32", [4]),  # type: ignore[arg-type]
    ],
)
def test_a_place_that_is_not_one_inside_the_region_is_refused(place: SharedTensor) -> None:
    region = Region.create("test")
    region.grow(1024)
    with pytest.raises(ValueError):
        region.take(place, "cpu")
    region.close()


def test_no_one_holding_the_file_can_shrink_it_under_the_auditors_reads() -> None:
    region = Region.create("test")
    region.grow(4096)
    with pytest.raises(PermissionError):
        os.ftruncate(region.fd, 0)
    assert not os.get_inheritable(region.fd), "only the child it is passed to gets it"
    region.close()


def test_a_file_the_other_side_grew_is_neither_shrunk_nor_mapped_whole_by_the_auditor() -> None:
    region = Region.create("test")
    region.grow(64)
    chosen = region.size
    os.ftruncate(region.fd, 1 << 40)  # the child grows it to a terabyte, sparse
    region.grow(chosen + 1)
    assert region.size == 2 * chosen, "the auditor maps what it chose, not the file's size"
    with pytest.raises(ValueError, match="runs past"):
        region.take(SharedTensor(region.size, "uint8", (64,)), "cpu")
    region.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_pinned_region_carries_gpu_tensors_both_ways() -> None:
    region = Region.create("test")
    region.pin()
    tensor = torch.randn(1 << 20, device="cuda").half()
    region.grow(shared.room(tensor.dtype, tuple(tensor.shape)))
    (place,) = region.put([tensor]) or []
    back = region.take(place, "cuda")
    assert back.device.type == "cuda" and torch.equal(back, tensor)
    region.grow(4 * region.size)  # remapped, and page-locked again
    (place,) = region.put([2 * tensor]) or []
    assert torch.equal(region.take(place, "cuda"), 2 * tensor)
    region.close()
