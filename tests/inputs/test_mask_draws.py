import pytest
import torch

from kernelaudit.errors import UsageError
from kernelaudit.inputs.masks import MASK_DISTRIBUTIONS, draw_mask


def keep(name: str, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    return draw_mask(name, shape, "bool", torch.bool, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", list(MASK_DISTRIBUTIONS))
def test_same_seed_same_mask(name: str) -> None:
    assert torch.equal(keep(name, (16, 32), seed=5), keep(name, (16, 32), seed=5))


def test_random_keeps_three_quarters_and_never_masks_a_whole_row() -> None:
    for seed in range(5):
        mask = keep("random", (2000, 3), seed=seed)
        assert mask.any(dim=-1).all()
    wide = keep("random", (64, 1024))
    assert 0.73 < wide.double().mean().item() < 0.77
    assert not torch.equal(wide, keep("random", (64, 1024), seed=1))


def test_random_single_element_rows_are_all_kept() -> None:
    assert keep("random", (50, 1)).all()


def test_masked_rows_masks_about_a_quarter_of_rows_entirely() -> None:
    mask = keep("masked_rows", (4000, 16))
    fully_masked = ~mask.any(dim=-1)
    assert 0.22 < fully_masked.double().mean().item() < 0.28
    # The other rows look like "random": partly masked, never empty.
    assert not mask[~fully_masked].all()


@pytest.mark.parametrize("seed", range(5))
def test_masked_rows_masks_at_least_one_row(seed: int) -> None:
    assert (~keep("masked_rows", (2, 8), seed=seed).any(dim=-1)).sum() >= 1
    assert not keep("masked_rows", (8,), seed=seed).any()


def test_all_kept_keeps_everything() -> None:
    assert keep("all_kept", (3, 4, 5)).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_additive_masks_are_zero_or_minus_inf(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    additive = draw_mask("masked_rows", (32, 16), "additive", dtype, g)
    assert additive.dtype == dtype
    assert set(additive.unique().tolist()) == {0.0, float("-inf")}
    assert torch.equal(additive == 0, keep("masked_rows", (32, 16)))


def test_shapes_with_batch_dims_scalars_and_empties() -> None:
    assert keep("random", (2, 3, 8)).any(dim=-1).all()
    assert keep("random", ()).shape == ()
    assert keep("masked_rows", (0, 8)).shape == (0, 8)
    assert keep("random", (4, 0)).shape == (4, 0)


def test_additive_mask_needs_a_floating_dtype() -> None:
    with pytest.raises(UsageError, match="floating dtype"):
        draw_mask("random", (2, 2), "additive", torch.int32, torch.Generator())


def test_unknown_name_and_kind() -> None:
    with pytest.raises(UsageError, match="random, masked_rows, all_kept"):
        keep("causal", (2, 2))
    with pytest.raises(UsageError, match="'bool' or 'additive'"):
        draw_mask("random", (2, 2), "multiplicative", torch.float32, torch.Generator())
