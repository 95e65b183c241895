"""Index draws: which rows a gather, scatter or embedding touches, and how often.

Uniform ids spread contributions evenly, which is exactly what hides low-precision accumulation
and races on repeated ids. The other draws concentrate them the way real token streams do.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import torch

from kernelaudit.errors import UsageError

ZIPF_EXPONENT = 1.1
"""Close to the exponent of word frequencies in natural-language corpora."""

INDEX_DISTRIBUTIONS: Mapping[str, str] = MappingProxyType(
    {
        "uniform": "Every id equally likely: the draw benchmarks already use.",
        "zipf": (
            f"Zipf with s={ZIPF_EXPONENT} over ranks, ranks assigned to arbitrary ids: a few "
            "rows receive most contributions, as tokens do in real text, so per-row "
            "accumulation error and collisions between threads show."
        ),
        "hot": (
            "One id at about half of all positions, the rest uniform: a single row takes "
            "thousands of contributions (padding tokens, a frequent expert)."
        ),
        "sorted": (
            "Uniform ids sorted ascending: long runs of equal ids next to each other, which "
            "segmented reductions and atomics that assume spread-out ids get wrong."
        ),
        "boundary": (
            "Half the positions hold 0 or bound-1, the rest uniform: the first and last rows, "
            "where off-by-one indexing reads or writes out of bounds."
        ),
        "argmax": (
            "Each id the position of the largest value in its row of the floating input the "
            "ids index (the input shaped like the ids plus the bound's axis): labels a "
            "trained model predicts right, where a cross-entropy is almost zero and its "
            "rounding shows. Only for ids that have such an input."
        ),
    }
)

ARGMAX = "argmax"
"""The index draw taken from another input's values (`argmax_source`), not from a generator."""


def _uniform(shape: tuple[int, ...], bound: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(bound, shape, generator=generator, dtype=torch.int64)


def _zipf(shape: tuple[int, ...], bound: int, generator: torch.Generator) -> torch.Tensor:
    # Inverse CDF on the exact cumulative weight table: one binary search per draw, no
    # rejection loop, and the same result for the same generator state.
    weights = torch.arange(1, bound + 1, dtype=torch.float64).pow_(-ZIPF_EXPONENT)
    cumulative = weights.cumsum_(0)
    u = torch.rand(shape, generator=generator, dtype=torch.float64) * cumulative[-1]
    ranks = torch.searchsorted(cumulative, u, right=True).clamp_(max=bound - 1)
    # The hottest ids are arbitrary rows: a kernel that special-cases row 0 must not pass.
    ids = torch.randperm(bound, generator=generator)
    return ids[ranks]


def _hot(shape: tuple[int, ...], bound: int, generator: torch.Generator) -> torch.Tensor:
    hot_id = int(torch.randint(bound, (), generator=generator))
    uniform = _uniform(shape, bound, generator)
    at_hot = torch.rand(shape, generator=generator, dtype=torch.float64) < 0.5
    return uniform.masked_fill_(at_hot, hot_id)


def _sorted(shape: tuple[int, ...], bound: int, generator: torch.Generator) -> torch.Tensor:
    return _uniform(shape, bound, generator).view(-1).sort().values.view(shape)


def _boundary(shape: tuple[int, ...], bound: int, generator: torch.Generator) -> torch.Tensor:
    uniform = _uniform(shape, bound, generator)
    u = torch.rand(shape, generator=generator, dtype=torch.float64)
    uniform.masked_fill_(u < 0.25, 0)
    return uniform.masked_fill_((u >= 0.25) & (u < 0.5), bound - 1)


_DRAWS = {
    "uniform": _uniform,
    "zipf": _zipf,
    "hot": _hot,
    "sorted": _sorted,
    "boundary": _boundary,
}


def draw_index(
    name: str, shape: tuple[int, ...], bound: int, dtype: torch.dtype, generator: torch.Generator
) -> torch.Tensor:
    """Ids in [0, bound) of distribution `name`, on the CPU, exactly `dtype`."""
    if name == ARGMAX:
        raise UsageError(
            f"index distribution {name!r} takes its ids from another input's values; "
            "draw it through kernelaudit.inputs.materialize"
        )
    draw = _DRAWS.get(name)
    if draw is None:
        known = ", ".join(INDEX_DISTRIBUTIONS)
        raise UsageError(f"unknown index distribution {name!r}; choose one of: {known}")
    if bound < 1:
        raise UsageError(
            f"index distribution {name!r} needs a bound of at least 1, got {bound}; "
            "give the axis the ids index a size of at least 1"
        )
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise UsageError(
            f"index values cannot be stored as {dtype}; declare the index input with an "
            "integer dtype such as torch.int64"
        )
    if bound - 1 > torch.iinfo(dtype).max:
        raise UsageError(
            f"ids up to {bound - 1} do not fit in {dtype}; declare the index input with a "
            "wider integer dtype such as torch.int64"
        )
    return draw(tuple(shape), bound, generator).to(dtype)
