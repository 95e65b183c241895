"""What the worker watches around a call: output objects, fingerprints, process-wide state, and
buffers rewritten in place for replay probes."""

from __future__ import annotations

import time

import pytest
import torch

from kernelaudit.runner.boundary.state import snapshot
from kernelaudit.runner.worker.placing import rewrite
from kernelaudit.runner.worker.watch import describe_output, fingerprint


def test_a_plain_tensor_is_described_as_one() -> None:
    found = describe_output(torch.zeros(3, 4))
    assert found.type_name == "torch.Tensor"
    assert found.layout == "strided" and not found.overlapping and not found.attributes
    assert (found.dtype, found.shape, found.stride) == ("float32", (3, 4), (4, 1))


def test_subclasses_expanded_views_and_attributes_are_told_apart() -> None:
    class Lazy(torch.Tensor):
        pass

    assert describe_output(torch.zeros(3).as_subclass(Lazy)).type_name.endswith("Lazy")
    assert describe_output(torch.zeros(1, 4).expand(3, 4)).overlapping
    assert not describe_output(torch.zeros(4, 3).t()).overlapping
    tagged = torch.zeros(2)
    tagged.cpu = lambda: torch.ones(2)  # type: ignore[method-assign]
    assert describe_output(tagged).attributes == ("cpu",)
    assert describe_output([1, 2]).device == ""
    assert describe_output(torch.empty(2, device="meta")).layout == "meta"


def test_a_fingerprint_sees_any_changed_element_and_ignores_layout() -> None:
    values = torch.randn(1000, dtype=torch.float64)
    changed = values.clone()
    changed[777] = torch.nextafter(changed[777], torch.tensor(1e9, dtype=torch.float64))
    assert fingerprint(values) == fingerprint(values.clone())
    assert fingerprint(values) != fingerprint(changed)
    swapped = values.clone()
    swapped[[1, 2]] = swapped[[2, 1]]
    assert fingerprint(values) != fingerprint(swapped)
    matrix = torch.randn(5, 7)
    assert fingerprint(matrix) == fingerprint(matrix.t().contiguous().t())


@pytest.mark.parametrize("words", [5, 65521, 2 * 65521 + 7])
def test_a_fingerprint_is_the_plain_and_the_position_weighted_sum_of_the_words(words: int) -> None:
    """Its one pass by columns gives the sums it is defined by, a word past a whole row of
    65521 included, and sees a change in the first column as in the last words."""
    values = torch.randint(-(2**31), 2**31 - 1, (words,), dtype=torch.int32)

    def int64(total: int) -> int:  # the device's sums wrap as int64 does
        return (total + 2**63) % 2**64 - 2**63

    plain = int64(sum(values.tolist()))
    weighted = int64(sum(w * (i % 65521 + 1) for i, w in enumerate(values.tolist())))
    assert fingerprint(values) == f"{plain:x}:{weighted:x}"
    for position in (0, words - 1):
        changed = values.clone()
        changed[position] += 1
        assert fingerprint(changed) != fingerprint(values)


def test_rewrite_keeps_address_and_version_counter() -> None:
    view = torch.zeros(4, 6)[:, ::2]
    address, version = view.data_ptr(), view._version
    rewrite(view, torch.arange(12.0).reshape(4, 3))
    assert view.data_ptr() == address and view._version == version
    assert torch.equal(view, torch.arange(12.0).reshape(4, 3))


def test_a_snapshot_names_what_changed() -> None:
    before = snapshot(torch.device("cpu"))
    saved = time.perf_counter
    precision = torch.get_float32_matmul_precision()
    try:
        time.perf_counter = lambda: 0.0  # type: ignore[assignment]
        torch.set_float32_matmul_precision("medium")
        torch.rand(1)
        changes = {c.name: c for c in before.changes_to(snapshot(torch.device("cpu")))}
    finally:
        time.perf_counter = saved  # type: ignore[assignment]
        torch.set_float32_matmul_precision(precision)
    assert set(changes) == {
        "time.perf_counter",
        "torch.get_float32_matmul_precision()",
        "torch.backends.cuda.matmul.allow_tf32",  # "medium" precision allows TF32
        "torch RNG state (CPU)",
    }
    assert changes["torch.get_float32_matmul_precision()"].after == "'medium'"
    restored = before.changes_to(snapshot(torch.device("cpu")))
    assert [c.name for c in restored] == ["torch RNG state (CPU)"]  # random draws stay drawn
