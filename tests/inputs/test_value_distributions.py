import math

import pytest
import torch

from kernelaudit.errors import UsageError
from kernelaudit.inputs import draws
from kernelaudit.inputs.distributions import (
    FLOAT_DISTRIBUTIONS,
    Distribution,
    default_float,
    draw_float,
)

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def draw(name: str, shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return draw_float(name, shape, dtype, torch.Generator().manual_seed(seed))


def identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8))
    )


@pytest.mark.parametrize("name", list(FLOAT_DISTRIBUTIONS))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_same_seed_same_bits_and_exact_dtype(name: str, dtype: torch.dtype) -> None:
    a = draw(name, (8, 64), dtype, seed=3)
    b = draw(name, (8, 64), dtype, seed=3)
    assert a.dtype == dtype and a.device.type == "cpu" and a.shape == (8, 64)
    assert identical(a, b)
    if name != "ones":  # the one distribution that draws nothing at random
        assert not identical(a, draw(name, (8, 64), dtype, seed=4))


@pytest.mark.parametrize("name", list(FLOAT_DISTRIBUTIONS))
def test_every_distribution_handles_scalars_and_empty_tensors(name: str) -> None:
    assert draw(name, (), torch.float32).shape == ()
    assert draw(name, (0, 5), torch.float32).shape == (0, 5)
    assert draw(name, (5, 0), torch.float32).shape == (5, 0)


@pytest.mark.parametrize(
    "name", [n for n in FLOAT_DISTRIBUTIONS if n not in ("nonfinite", "neg_inf_rows")]
)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_all_but_nonfinite_stay_finite(name: str, dtype: torch.dtype) -> None:
    assert torch.isfinite(draw(name, (256, 256), dtype)).all()


def test_normal_and_offset_moments() -> None:
    normal = draw("normal", (200_000,), torch.float32)
    offset = draw("offset", (200_000,), torch.float32).double()
    assert abs(normal.mean().item()) < 0.02 and abs(normal.std().item() - 1) < 0.02
    assert abs(offset.mean().item() - 32) < 0.02 and abs(offset.std().item() - 1) < 0.02


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_uniform_is_half_open_unit_interval(dtype: torch.dtype) -> None:
    values = draw("uniform", (100_000,), dtype)
    assert values.min() >= 0 and values.max() < 1
    assert values.double().mean().item() == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_small_integers_are_integers_in_range(dtype: torch.dtype) -> None:
    values = draw("small_integers", (10_000,), dtype).double()
    assert torch.equal(values, values.round())
    assert set(values.unique().tolist()) == set(range(-4, 5))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_tiny_mixes_subnormals_with_values_just_above_smallest_normal(dtype: torch.dtype) -> None:
    tiny = torch.finfo(dtype).smallest_normal
    magnitudes = draw("tiny", (10_000,), dtype).double().abs()
    subnormal = magnitudes < tiny
    assert (magnitudes > 0).all()
    assert 0.45 < subnormal.double().mean().item() < 0.55
    assert (magnitudes[~subnormal] <= 16 * tiny).all()
    lowest = max(tiny * 2.0**-10, tiny * torch.finfo(dtype).eps)
    assert (magnitudes >= lowest).all()
    signs = draw("tiny", (10_000,), dtype).double().sign()
    assert (signs > 0).any() and (signs < 0).any()


def test_tiny_has_a_subnormal_even_in_one_element() -> None:
    for seed in range(20):
        value = draw("tiny", (1,), torch.float32, seed=seed).abs()
        assert 0 < value.item() < torch.finfo(torch.float32).smallest_normal


def test_heavy_tailed_has_far_larger_extremes_than_normal() -> None:
    heavy = draw("heavy_tailed", (100_000,), torch.float32).abs()
    normal = draw("normal", (100_000,), torch.float32).abs()
    assert heavy.max() > 50 and normal.max() < 6
    # Most values stay near zero: the tail is rare, not the bulk.
    assert heavy.median() < 1.5


def test_outlier_channels_scale_about_one_percent_of_last_dim() -> None:
    values = draw("outlier_channels", (512, 300), torch.float32)
    peak = values.abs().amax(dim=0)
    outliers = (peak > 50).nonzero().view(-1)
    assert len(outliers) == 3
    assert (peak[peak <= 50] < 10).all()
    other = draw("outlier_channels", (512, 300), torch.float32, seed=1).abs().amax(dim=0)
    assert not torch.equal((other > 50).nonzero().view(-1), outliers)


def test_outlier_channels_has_at_least_one_even_with_few_channels() -> None:
    peak = draw("outlier_channels", (256, 8), torch.float32).abs().amax(dim=0)
    assert int((peak > 50).sum()) == 1


def test_large_overflows_fp16_squares_but_not_fp32_accumulation() -> None:
    half = draw("large", (4096,), torch.float16)
    assert torch.isinf(half * half).any()
    assert torch.isfinite(half.float().square().sum())
    for dtype in (torch.bfloat16, torch.float32):
        values = draw("large", (1 << 20,), dtype).float()
        assert values.abs().median() > 2.0**45
        assert torch.isfinite(values.square().sum())
        assert torch.isfinite(values.square()).all()
        assert torch.isinf(values.half()).all()
    wide = draw("large", (4096,), torch.float64)
    assert wide.abs().median() > 2.0**195 and torch.isfinite(wide.square().sum())


def test_constant_rows_have_one_value_per_row() -> None:
    values = draw("constant_rows", (64, 33), torch.bfloat16)
    assert torch.equal(values, values[:, :1].expand_as(values))
    assert values[:, 0].unique().numel() > 32
    assert values.float().var(dim=-1).max() == 0


def test_nonfinite_holds_each_kind_in_a_small_fraction() -> None:
    values = draw("nonfinite", (100, 100), torch.float16)
    count = int((~torch.isfinite(values)).sum())
    assert 3 <= count <= 30
    assert torch.isnan(values).any()
    assert (values == math.inf).any() and (values == -math.inf).any()


@pytest.mark.parametrize("seed", range(4))
def test_a_large_nonfinite_draw_holds_a_tenth_of_a_percent_without_permuting_it(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 2 * draws.CHUNK + 5
    permute = torch.randperm

    def small_only(count: int, *args: object, **kwargs: object) -> torch.Tensor:
        assert count < n, "every position of a large tensor permuted"
        return permute(count, *args, **kwargs)

    monkeypatch.setattr(torch, "randperm", small_only)
    values = draw("nonfinite", (n,), torch.float32, seed=seed)
    count = int((~torch.isfinite(values)).sum())
    assert 0.0009 * n < count < 0.0011 * n
    assert torch.isnan(values).any()
    assert (values == math.inf).any() and (values == -math.inf).any()
    again = draw("nonfinite", (n,), torch.float32, seed=seed)
    assert torch.equal(values.view(torch.int32), again.view(torch.int32))


@pytest.mark.parametrize("seed", range(5))
def test_nonfinite_with_three_elements_holds_nan_and_both_infinities(seed: int) -> None:
    values = draw("nonfinite", (3,), torch.float32, seed=seed)
    assert torch.isnan(values).sum() == 1
    assert (values == math.inf).sum() == 1 and (values == -math.inf).sum() == 1


def test_weight_is_centered_on_one_and_not_all_ones() -> None:
    values = draw("weight", (10_000,), torch.float32)
    assert values.mean().item() == pytest.approx(1, abs=0.02)
    assert values.std().item() == pytest.approx(0.25, abs=0.02)


def test_default_float_by_role() -> None:
    assert default_float("activation") == "normal"
    assert default_float("weight") == "weight"


def test_map_builds_a_new_named_distribution() -> None:
    normal = FLOAT_DISTRIBUTIONS["normal"]
    doubled = normal.map(lambda values, _: values * 2, name="doubled", summary="twice normal")
    assert isinstance(doubled, Distribution) and doubled.name == "doubled"
    a = doubled.sample((16,), torch.float64, torch.Generator().manual_seed(0))
    b = normal.sample((16,), torch.float64, torch.Generator().manual_seed(0))
    assert torch.equal(a, 2 * b)


def test_every_distribution_explains_itself() -> None:
    for name, distribution in FLOAT_DISTRIBUTIONS.items():
        assert distribution.name == name and len(distribution.summary) > 20


def test_unknown_name_lists_known_names() -> None:
    with pytest.raises(UsageError, match="choose one of: normal, uniform"):
        draw("gaussian", (4,), torch.float32)


def test_integer_dtype_is_refused() -> None:
    with pytest.raises(UsageError, match="floating dtype"):
        draw("normal", (4,), torch.int32)
