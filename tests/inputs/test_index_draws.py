import pytest
import torch

from kernelaudit.errors import UsageError
from kernelaudit.inputs.indices import ARGMAX, INDEX_DISTRIBUTIONS, ZIPF_EXPONENT, draw_index

DRAWN = [name for name in INDEX_DISTRIBUTIONS if name != ARGMAX]
"""The draws made from a generator (argmax takes another input's values: test_row_draws)."""


def draw(
    name: str,
    shape: tuple[int, ...],
    bound: int,
    seed: int = 0,
    dtype: torch.dtype = torch.int64,
) -> torch.Tensor:
    return draw_index(name, shape, bound, dtype, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", DRAWN)
@pytest.mark.parametrize("bound", [1, 2, 7, 1000])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_ids_lie_in_range_with_exact_dtype(name: str, bound: int, dtype: torch.dtype) -> None:
    ids = draw(name, (4, 500), bound, dtype=dtype)
    assert ids.dtype == dtype and ids.shape == (4, 500)
    assert ids.min() >= 0 and ids.max() < bound


@pytest.mark.parametrize("name", DRAWN)
def test_same_seed_same_ids(name: str) -> None:
    assert torch.equal(draw(name, (1000,), 50, seed=1), draw(name, (1000,), 50, seed=1))
    assert not torch.equal(draw(name, (1000,), 50, seed=1), draw(name, (1000,), 50, seed=2))


@pytest.mark.parametrize("name", DRAWN)
def test_scalar_and_empty_shapes(name: str) -> None:
    assert draw(name, (), 10).shape == ()
    assert draw(name, (0, 3), 10).shape == (0, 3)


def test_zipf_concentrates_on_a_few_ids_far_more_than_uniform() -> None:
    zipf = draw("zipf", (100_000,), 10_000).bincount(minlength=10_000)
    uniform = draw("uniform", (100_000,), 10_000).bincount(minlength=10_000)
    assert zipf.max() > 20 * uniform.max()
    # Most ids are rarely or never drawn: the long tail.
    assert (zipf == 0).sum() > (uniform == 0).sum()


def test_zipf_top_frequency_matches_the_law() -> None:
    bound, n = 1000, 400_000
    counts = draw("zipf", (n,), bound).bincount(minlength=bound).sort(descending=True).values
    ranks = torch.arange(1, bound + 1, dtype=torch.float64)
    expected = ranks.pow(-ZIPF_EXPONENT) / ranks.pow(-ZIPF_EXPONENT).sum()
    for rank in range(3):
        p = expected[rank].item()
        sigma = (n * p * (1 - p)) ** 0.5
        assert abs(counts[rank].item() - n * p) < 5 * sigma


def test_zipf_hot_ids_are_arbitrary_rows() -> None:
    tops = {int(draw("zipf", (20_000,), 1000, seed=s).bincount().argmax()) for s in range(6)}
    assert len(tops) > 1 and tops != {0}


def test_zipf_handles_a_million_ids() -> None:
    ids = draw("zipf", (1_000_000,), 1_000_000)
    assert ids.min() >= 0 and ids.max() < 1_000_000


def test_hot_puts_one_id_at_about_half_of_positions() -> None:
    counts = draw("hot", (20_000,), 5000).bincount()
    assert 0.48 < counts.max().item() / 20_000 < 0.53
    hot_ids = {int(draw("hot", (1000,), 5000, seed=s).bincount().argmax()) for s in range(4)}
    assert len(hot_ids) > 1


def test_sorted_is_ascending_in_flattened_order() -> None:
    ids = draw("sorted", (30, 40), 100)
    flat = ids.view(-1)
    assert (flat[1:] >= flat[:-1]).all()
    assert ids.unique().numel() > 50


def test_boundary_hits_first_and_last_ids_a_quarter_each() -> None:
    ids = draw("boundary", (40_000,), 1000)
    assert 0.24 < (ids == 0).double().mean().item() < 0.27
    assert 0.24 < (ids == 999).double().mean().item() < 0.27


def test_bound_must_be_positive() -> None:
    with pytest.raises(UsageError, match="bound of at least 1"):
        draw("uniform", (3,), 0)


def test_ids_must_fit_the_dtype() -> None:
    with pytest.raises(UsageError, match=r"do not fit in torch\.int8"):
        draw("uniform", (3,), 1000, dtype=torch.int8)
    with pytest.raises(UsageError, match="integer dtype"):
        draw("uniform", (3,), 10, dtype=torch.float32)


def test_unknown_name_lists_known_names() -> None:
    with pytest.raises(UsageError, match="uniform, zipf, hot, sorted, boundary"):
        draw("powerlaw", (3,), 10)
