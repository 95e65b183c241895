"""The masked-softmax example: guarding empty rows gives the reference's zeros; without the
guard a fully masked row comes out NaN, and every other row is still right."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.inputs.layouts import present


def logits(
    rows: int,
    cols: int,
    dtype: torch.dtype,
    device: str,
    masked_rows: tuple[int, ...] = (),
    scale: float = 4.0,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores and a mask keeping ~75% of each row (at least one element), with `masked_rows`
    keeping nothing."""
    generator = torch.Generator().manual_seed(seed)
    x = scale * torch.randn(rows, cols, generator=generator)
    keep = torch.rand(rows, cols, generator=generator) < 0.75
    keep[torch.arange(rows), torch.randint(cols, (rows,), generator=generator)] = True
    keep[list(masked_rows)] = False
    return x.to(dtype).to(device), keep.to(device)


@pytest.fixture
def softmax(example):
    return example("softmax")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(
    ("rows", "cols", "masked_rows"), [(1, 1, ()), (1, 1, (0,)), (7, 7, (2,)), (5, 1025, (0, 4))]
)
def test_guarded_softmax_matches_the_reference_at_odd_sizes(
    softmax, device, dtype, rows, cols, masked_rows
):
    run = softmax.run("guards_masked_rows", *logits(rows, cols, dtype, device, masked_rows))
    assert run.correct, run.describe()


@pytest.mark.parametrize(
    ("tensor", "layout"),
    [("x", "transposed"), ("x", "offset"), ("x", "strided"), ("mask", "transposed")],
)
def test_guarded_softmax_reads_any_layout(softmax, device, tensor, layout):
    x, keep = logits(9, 130, torch.float16, device, masked_rows=(3,))
    inputs = {"x": x, "mask": keep}
    inputs[tensor] = present(inputs[tensor], layout)
    run = softmax.run("guards_masked_rows", *inputs.values())
    assert run.correct, run.describe()


def test_guarded_softmax_reads_a_mask_broadcast_over_rows(softmax, device):
    x, keep = logits(6, 50, torch.float32, device)
    run = softmax.run("guards_masked_rows", x, present(keep[:1].expand(6, 50), "expanded"))
    assert run.correct, run.describe()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_guarded_softmax_survives_logits_that_overflow_exp(softmax, device, dtype):
    # exp(11.1) already overflows fp16 and exp(88.8) fp32: only max-subtraction keeps it finite.
    x, keep = logits(8, 300, dtype, device, scale=8e3 if dtype == torch.float16 else 1e30)
    run = softmax.run("guards_masked_rows", x, keep)
    assert run.correct, run.describe()
    assert run.result.isfinite().all()


def test_guarded_softmax_gives_zeros_for_fully_masked_rows(softmax, device):
    x, keep = logits(6, 33, torch.float32, device, masked_rows=(1, 4))
    x[5][keep[5]] = float("-inf")  # kept, but all -inf: nothing to normalise either
    run = softmax.run("guards_masked_rows", x, keep)
    assert run.correct, run.describe()
    assert torch.count_nonzero(run.result[[1, 4, 5]]) == 0
    assert torch.allclose(run.result[[0, 2, 3]].sum(dim=1), torch.ones(3, device=device))


def test_guarded_softmax_spreads_a_kept_nan_over_its_row_only(softmax, device):
    x, keep = logits(4, 20, torch.float16, device)
    keep[1, 3], keep[2, 4] = True, False
    x[1, 3] = x[2, 4] = float("nan")
    run = softmax.run("guards_masked_rows", x, keep)
    assert run.correct, run.describe()
    assert run.result[1].isnan().all()
    assert run.result[[0, 2, 3]].isfinite().all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_unguarded_softmax_is_right_when_every_row_keeps_something(softmax, device, dtype):
    run = softmax.run("nan_on_masked_rows", *logits(256, 1024, dtype, device))
    assert run.correct, run.describe()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_unguarded_softmax_turns_fully_masked_rows_into_nan(softmax, device, dtype):
    x, keep = logits(256, 1024, dtype, device, masked_rows=(0, 100, 255))
    buggy = softmax.run("nan_on_masked_rows", x, keep)
    correct = softmax.run("guards_masked_rows", x, keep)
    assert not buggy.same_nonfinite
    assert buggy.result.isnan().any(dim=1).nonzero().flatten().tolist() == [0, 100, 255]
    assert buggy.result[[0, 100, 255]].isnan().all()
    others = [r for r in range(256) if r not in (0, 100, 255)]
    assert torch.equal(buggy.result[others], correct.result[others])
