"""The matmul example: a ceil-divided grid covers every tile; a floor-divided one is right at
multiples of the tile size and leaves the edge rows and columns unwritten elsewhere."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.inputs.layouts import present


def operands(
    m: int, n: int, k: int, dtype: torch.dtype, device: str, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=generator)
    b = torch.randn(k, n, generator=generator)
    return a.to(dtype).to(device), b.to(dtype).to(device)


@pytest.fixture
def matmul(example):
    return example("matmul")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("m", "n", "k"), [(1, 1, 1), (7, 7, 7), (129, 131, 1025)])
def test_masked_tiles_match_the_reference_at_odd_sizes(matmul, device, dtype, m, n, k):
    run = matmul.run("masked_tiles", *operands(m, n, k, dtype, device))
    assert run.correct, run.describe()


@pytest.mark.parametrize(
    ("tensor", "layout"),
    [("a", "transposed"), ("b", "transposed"), ("a", "offset"), ("b", "strided")],
)
def test_masked_tiles_read_any_layout(matmul, device, tensor, layout):
    inputs = dict(zip(("a", "b"), operands(130, 70, 45, torch.float32, device), strict=True))
    inputs[tensor] = present(inputs[tensor], layout)
    run = matmul.run("masked_tiles", *inputs.values())
    assert run.correct, run.describe()


def test_masked_tiles_multiply_in_full_fp32(matmul, device):
    # 1 + 2**-12 is exact in fp32 but rounds to 1 in TF32 (10 mantissa bits), and every partial
    # sum of such terms is exact in fp32: only a full-fp32 multiply gives 256 + 2**-4. (The
    # interpreter always multiplies in full fp32; on a GPU this tells "ieee" from TF32.)
    a = torch.full((128, 256), 1 + 2**-12, device=device)
    b = torch.ones(256, 128, device=device)
    run = matmul.run("masked_tiles", a, b)
    assert torch.equal(run.result, torch.full((128, 128), 256 + 2**-4, device=device))


def test_masked_tiles_spread_a_nan_over_its_row_only(matmul, device):
    a, b = operands(20, 30, 40, torch.float16, device)
    a[3, 4] = float("nan")
    run = matmul.run("masked_tiles", a, b)
    assert run.correct, run.describe()
    assert run.result[3].isnan().all()
    assert int(run.result.isnan().sum()) == 30


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_dropping_partial_tiles_is_right_at_tile_multiples(matmul, device, dtype):
    run = matmul.run("drops_partial_tiles", *operands(256, 256, 256, dtype, device))
    assert run.correct, run.describe()


def test_dropping_partial_tiles_leaves_the_edges_unwritten(matmul, device):
    a, b = operands(257, 300, 64, torch.float32, device)
    buggy = matmul.run("drops_partial_tiles", a, b)
    correct = matmul.run("masked_tiles", a, b)
    assert correct.correct, correct.describe()
    # The full tiles are computed as before; the last row and columns 256.. are not.
    assert torch.equal(buggy.result[:256, :256], correct.result[:256, :256])
    assert not torch.equal(buggy.result[256:], correct.result[256:])
    assert not torch.equal(buggy.result[:, 256:], correct.result[:, 256:])


def test_dropping_partial_tiles_writes_nothing_below_one_tile(matmul, device):
    a, b = operands(100, 100, 100, torch.float32, device)
    run = matmul.run("drops_partial_tiles", a, b)
    assert not run.correct
    written = run.result.isfinite() & ((run.result.double() - run.truth).abs() < 1e-3)
    assert written.float().mean() < 0.01
