"""The LayerNorm example: masked statistics are right everywhere; counting the padding lanes in
the variance is right at power-of-two hidden sizes and wrong next to them once rows have a mean."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.inputs.layouts import present

EPS = 1e-5


def layer(
    rows: int, hidden: int, dtype: torch.dtype, device: str, mean: float = 32.0, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, hidden, generator=generator) + mean
    weight = 1 + 0.25 * torch.randn(hidden, generator=generator)
    bias = torch.randn(hidden, generator=generator)
    return tuple(t.to(dtype).to(device) for t in (x, weight, bias))  # type: ignore[return-value]


@pytest.fixture
def layernorm(example):
    return example("layernorm")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("rows", "hidden"), [(1, 1), (7, 7), (5, 131), (3, 1025)])
def test_masked_statistics_match_the_reference_at_odd_sizes(layernorm, device, dtype, rows, hidden):
    run = layernorm.run("masked_statistics", *layer(rows, hidden, dtype, device), EPS)
    assert run.correct, run.describe()


@pytest.mark.parametrize(
    ("tensor", "layout"),
    [
        ("x", "transposed"),
        ("x", "offset"),
        ("x", "strided"),
        ("weight", "strided"),
        ("bias", "offset"),
    ],
)
def test_masked_statistics_read_any_layout(layernorm, device, tensor, layout):
    inputs = dict(zip(("x", "weight", "bias"), layer(9, 257, torch.float16, device), strict=True))
    inputs[tensor] = present(inputs[tensor], layout)
    run = layernorm.run("masked_statistics", *inputs.values(), EPS)
    assert run.correct, run.describe()


def test_masked_statistics_read_a_broadcast_weight(layernorm, device):
    x, _, bias = layer(9, 257, torch.float32, device)
    weight = present(torch.full((257,), 1.5, device=device), "expanded")
    run = layernorm.run("masked_statistics", x, weight, bias, EPS)
    assert run.correct, run.describe()


def test_masked_statistics_normalise_constant_rows_to_exactly_the_bias(layernorm, device):
    # Zero variance: any error in the mean is amplified by 1/sqrt(eps).
    _, weight, bias = layer(1, 1025, torch.float32, device)
    x = torch.tensor([0.1, -3.7, 1e3, 7.0], device=device)[:, None].repeat(1, 1025)
    run = layernorm.run("masked_statistics", x, weight, bias, EPS)
    assert torch.equal(run.result, bias.expand(4, 1025))


def test_masked_statistics_keep_a_nan_in_its_own_row(layernorm, device):
    x, weight, bias = layer(6, 100, torch.float16, device)
    x[2, 5] = float("nan")
    run = layernorm.run("masked_statistics", x, weight, bias, EPS)
    assert run.correct, run.describe()
    assert run.result[2].isnan().all()
    assert run.result[[0, 1, 3, 4, 5]].isfinite().all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_counting_padding_lanes_is_right_at_a_power_of_two_hidden(layernorm, device, dtype):
    run = layernorm.run("counts_padding_lanes", *layer(256, 1024, dtype, device), EPS)
    assert run.correct, run.describe()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_counting_padding_lanes_is_wrong_at_hidden_1025_with_mean_32(layernorm, device, dtype):
    run = layernorm.run("counts_padding_lanes", *layer(256, 1025, dtype, device), EPS)
    # 1023 padding lanes each add 32**2 to a variance of ~1: outputs shrink ~32x toward bias.
    assert run.error > 0.5, run.describe()
