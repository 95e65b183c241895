"""Value distributions for floating-point inputs: small composable values, drawn seeded on the CPU
(large tensors on several cores, `kernelaudit.inputs.draws`).

A `Distribution` computes float64 values for a tensor of a given dtype (magnitudes may depend on
the dtype) and `draw_float` rounds them to that dtype, so every value a kernel sees is exactly
representable and the same seed gives the same bits on every machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import torch

from kernelaudit.errors import UsageError
from kernelaudit.inputs import draws

Sampler = Callable[[tuple[int, ...], torch.dtype, torch.Generator], torch.Tensor]
"""(shape, target dtype, generator) -> float64 CPU tensor of that shape."""


@dataclass(frozen=True)
class Distribution:
    """A named way to fill a floating tensor.

    `sample` returns float64 values on the CPU, meant for a tensor of the given dtype; callers
    go through `draw_float`, which rounds them to that dtype.
    """

    name: str
    summary: str
    sample: Sampler

    def map(
        self,
        fn: Callable[[torch.Tensor, torch.Generator], torch.Tensor],
        name: str,
        summary: str,
    ) -> Distribution:
        """A new distribution whose values are `fn(values, generator)` of this one's.

        `fn` works on the float64 values before rounding and gets the same generator, for
        transforms that need randomness of their own (which channels become outliers).
        """
        base = self.sample

        def sample(
            shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator
        ) -> torch.Tensor:
            return fn(base(shape, dtype, generator), generator)

        return Distribution(name=name, summary=summary, sample=sample)


def _normal(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    return draws.randn(shape, generator)


def _uniform(
    shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator
) -> torch.Tensor:
    values = draws.rand(shape, generator)
    # Rounding to a short mantissa would turn values near 1 into exactly 1.0; the largest value
    # below 1 in the target dtype keeps the promise of a half-open interval.
    return values.clamp_(max=1.0 - torch.finfo(dtype).eps / 2)


def _clip_finite(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # Values past the dtype's largest finite number would round to inf; a distribution that
    # promises finite values must not depend on luck in its tails.
    largest = torch.finfo(dtype).max
    return values.clamp_(min=-largest, max=largest)


def _heavy_tailed(
    shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator
) -> torch.Tensor:
    # Student-t with 2 degrees of freedom: z / sqrt(chi2_2 / 2), and chi2_2 / 2 = -ln(1 - u)
    # is exponential. Its variance is infinite, so a few values are far larger than the rest.
    z = draws.randn(shape, generator)
    u = draws.rand(shape, generator)
    # in place: the same operations, without a tensor of the case's size for each step
    half_chi2 = u.neg_().log1p_().neg_().clamp_(min=1e-300)
    return _clip_finite(z.div_(half_chi2.sqrt_()), dtype)


def _large_scale(dtype: torch.dtype) -> float:
    if dtype == torch.float64:
        return 2.0**200
    info = torch.finfo(dtype)
    if info.max > 2.0**100:
        # bfloat16 and float32 share float32's range: squares (2**100) and sums of a million
        # of them (2**120) fit in an fp32 accumulator, but anything routed through fp16 is inf.
        return 2.0**50
    # float16 and narrower: squares overflow the dtype itself but not an fp32 accumulator.
    return info.max / 8


def _large(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    values = draws.randn(shape, generator).mul_(_large_scale(dtype))
    return _clip_finite(values, dtype)


def _tiny(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    info = torch.finfo(dtype)
    tiny = info.smallest_normal
    # Subnormals are k * (tiny * eps) for k in [1, 1/eps). Drawing k log-uniformly spreads the
    # magnitudes over the whole range down to tiny * 2**-10 (or the smallest subnormal, for
    # dtypes with fewer mantissa bits), and every such value is exact in float64 and the dtype.
    k_max = round(1 / info.eps) - 1
    k_min = max(1, round(2.0**-10 / info.eps))
    u = draws.rand(shape, generator)
    # in place where the values allow it: the same operations, without a tensor of the case's
    # size for each step (the signs in one byte each, the same values)
    subnormal = ((k_max / k_min) ** u).mul_(k_min).floor_().clamp_(k_min, k_max)
    del u
    subnormal.mul_(tiny * info.eps)
    normal = draws.rand(shape, generator).mul_(15).add_(1).mul_(tiny)
    picks = draws.rand(shape, generator) < 0.5
    if picks.numel():
        # At least one subnormal, whatever the size, so a flush-to-zero is always visible.
        forced = int(torch.randint(picks.numel(), (), generator=generator))
        picks.view(-1)[forced] = True
    signs = draws.randint(0, 2, shape, generator, dtype=torch.int8).mul_(2).sub_(1)
    return torch.where(picks, subnormal, normal).mul_(signs)


def _constant_rows(
    shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator
) -> torch.Tensor:
    if not shape:
        return draws.randn((), generator)
    rows = draws.randn((*shape[:-1], 1), generator)
    return rows.expand(shape).contiguous()


def _small_integers(
    shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator
) -> torch.Tensor:
    return draws.randint(-4, 5, shape, generator).to(torch.float64)


def _scale_outlier_channels(values: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    channels = values.shape[-1] if values.dim() else 1
    if channels == 0:
        return values
    count = max(1, round(0.01 * channels))
    chosen = torch.randperm(channels, generator=generator)[:count]
    if values.dim() == 0:
        return values * 100
    values[..., chosen] *= 100
    return values


def _set_nonfinite(values: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    n = values.numel()
    if n == 0:
        return values
    wanted = max(1, round(0.001 * n), min(n, 3))
    flat = values.view(-1)
    hits = torch.nonzero(draws.rand((n,), generator) < 0.001)
    positions = hits.view(-1)
    # Small tensors (or an unlucky draw) fall back to an exact draw without replacement. A
    # large tensor keeps what the Bernoulli draw gave, about 0.1% of it: a permutation of every
    # position took 15 s on one core at 671 M elements, and half of all such draws fell short
    # of the exact count by chance.
    enough = wanted if n <= draws.CHUNK else min(n, 3)
    if positions.numel() < enough:
        positions = torch.randperm(n, generator=generator)[:wanted]
    # A balanced, shuffled assignment guarantees NaN, +inf and -inf each appear when >= 3 hit.
    kinds = torch.randperm(positions.numel(), generator=generator) % 3
    specials = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=torch.float64)
    flat[positions] = specials[kinds]
    return values


_ROW_SHARE = 4
"""The row draws change about one row in this many (at least one)."""

PEAKED = "peaked"

PEAK_MARGIN = 5.0
"""A peaked row's maximum is ln(row length) + PEAK_MARGIN: the other values (N(0, 1), whose
exponentials average e^0.5) then hold about 1.65 e^-5, some 1.1%, of a softmax's mass, as in a
trained model's confident predictions. Confident enough that rounding the row's log-sum-exp
to 16 bits loses most of the loss, and not so extreme that float32 arithmetic loses it too
(1 - p at the maximum, a few float32 ulps of 1 against 1.1%)."""


def _rows(values: torch.Tensor) -> torch.Tensor:
    """`values` as rows along its last dimension (one row when it has one dimension or none)."""
    return values.reshape(-1, values.shape[-1] if values.dim() else 1)


def _chosen_rows(rows: int, generator: torch.Generator) -> torch.Tensor:
    """Which of `rows` rows a row draw changes: about one in `_ROW_SHARE`, at least one."""
    chosen = draws.rand((rows,), generator) * _ROW_SHARE < 1
    if rows and not bool(chosen.any()):
        chosen[int(torch.randint(rows, (), generator=generator))] = True
    return chosen


def _fill_rows(value: float) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor]:
    def fill(values: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if values.numel() == 0:
            return values
        rows = _rows(values)
        rows[_chosen_rows(rows.shape[0], generator)] = value
        return rows.view(values.shape)

    return fill


def peak(width: int) -> float:
    """The value a peaked row of `width` values holds at its maximum."""
    return math.log(max(1, width)) + PEAK_MARGIN


def _peak_rows(values: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    if values.numel() == 0:
        return values
    rows = _rows(values)
    width = rows.shape[1]
    at = torch.randint(width, (rows.shape[0], 1), generator=generator)
    rows.scatter_(1, at, peak(width))
    return rows.view(values.shape)


ACTIVATIONS_ONLY = frozenset({"neg_inf_rows", "peaked"})
"""Draws a sweep gives only inputs of role "activation": rows of -inf are what a mask leaves in
scores and logits, and peaked rows are confident logits; in a weight or an upstream gradient
the first only tests inf - inf and the second nothing a weight is."""

UNDEFINED_WHERE_NAN = frozenset({"zero_rows", "neg_inf_rows"})
"""Draws of whole rows a reference may leave undefined (a softmax of a row of -inf, a norm
without epsilon of a zero row): where the fp64 truth of such a case is NaN, the candidate's
value is not judged. Where the truth is defined, it must be met."""


_NORMAL = Distribution(
    name="normal",
    summary="N(0, 1): what benchmarks already use; the baseline the others depart from.",
    sample=_normal,
)

_DISTRIBUTIONS = (
    _NORMAL,
    Distribution(
        name="uniform",
        summary="U[0, 1): all positive, so signed cancellation cannot hide an error.",
        sample=_uniform,
    ),
    _NORMAL.map(
        lambda values, _: values.add_(32),
        name="offset",
        summary=(
            "N(0, 1) + 32: a large mean against a small spread. Variance computed as "
            "E[x^2] - E[x]^2 cancels catastrophically, and padding lanes counted in a mean or "
            "a variance shift it visibly."
        ),
    ),
    Distribution(
        name="heavy_tailed",
        summary=(
            "Student-t with 2 degrees of freedom, clipped to the dtype's finite range: rare "
            "values orders of magnitude above the rest, as in gradients and attention logits."
        ),
        sample=_heavy_tailed,
    ),
    _NORMAL.map(
        _scale_outlier_channels,
        name="outlier_channels",
        summary=(
            "N(0, 1) with ~1% (at least one) of the last dimension's channels scaled by 100, "
            "like the outlier features of LLM activations that break per-tensor scaling and "
            "low-precision accumulation."
        ),
    ),
    Distribution(
        name="large",
        summary=(
            "N(0, 1) times a large scale for the dtype (float16: max/8; bfloat16 and float32: "
            "2**50; float64: 2**200): a kernel accumulating in fp32 stays finite, one squaring "
            "or summing through fp16 overflows to inf."
        ),
        sample=_large,
    ),
    Distribution(
        name="tiny",
        summary=(
            "Half the values subnormal in the dtype, the rest just above its smallest normal "
            "number, random signs: exposes flush-to-zero and rescaling that underflows."
        ),
        sample=_tiny,
    ),
    Distribution(
        name="constant_rows",
        summary=(
            "Every row along the last dimension holds one value: zero variance, where "
            "normalisations divide by (almost) zero unless they add epsilon correctly."
        ),
        sample=_constant_rows,
    ),
    Distribution(
        name="small_integers",
        summary=(
            "Integers in [-4, 4]: exact in every dtype, and sums and products of them stay "
            "exact, so many results must match bit for bit."
        ),
        sample=_small_integers,
    ),
    _NORMAL.map(
        _set_nonfinite,
        name="nonfinite",
        summary=(
            "N(0, 1) with ~0.1% (at least one; NaN, +inf and -inf each at least once when "
            "there is room) non-finite: they must propagate where the reference propagates "
            "them and stay out of results that do not depend on them."
        ),
    ),
    _NORMAL.map(
        _fill_rows(0.0),
        name="zero_rows",
        summary=(
            "N(0, 1) with about a quarter of the rows (at least one) all zero: padding, "
            "cleared activations, a feature map after ReLU. A normalisation that forgets its "
            "epsilon divides by zero there."
        ),
    ),
    _NORMAL.map(
        _fill_rows(float("-inf")),
        name="neg_inf_rows",
        summary=(
            "N(0, 1) with about a quarter of the rows (at least one) all -inf: what a causal "
            "or padding mask leaves before a softmax, log-sum-exp or cross-entropy. Where the "
            "reference's truth is NaN on such a row, any value is accepted there."
        ),
    ),
    _NORMAL.map(
        _peak_rows,
        name=PEAKED,
        summary=(
            "N(0, 1) with one value per row at ln(row length) + 5, far above the rest: the "
            "confident logits of a trained model, where a softmax is nearly one-hot (1% of "
            "the mass off the maximum) and the rounding of the row's maximum decides the "
            "result (with ids at each row's argmax, a cross-entropy of almost zero)."
        ),
    ),
    _NORMAL.map(
        lambda values, _: values.mul_(0.25).add_(1),
        name="weight",
        summary=(
            "1 + 0.25 N(0, 1): norm weights that are not all ones, so a kernel that ignores "
            "or misindexes its weight shows."
        ),
    ),
    Distribution(
        name="ones",
        summary=(
            "All ones: the upstream gradient `loss.sum().backward()` hands a backward, and the "
            "only one many verifiers try; a backward that reads one element of its upstream "
            "gradient for all of them passes it."
        ),
        sample=lambda shape, dtype, generator: torch.ones(shape, dtype=torch.float64),
    ),
)

FLOAT_DISTRIBUTIONS: Mapping[str, Distribution] = MappingProxyType(
    {d.name: d for d in _DISTRIBUTIONS}
)


def default_float(role: str) -> str:
    """The distribution an input of `role` gets when a case names none."""
    return "weight" if role == "weight" else "normal"


def draw_float(
    name: str, shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator
) -> torch.Tensor:
    """Values of distribution `name`, on the CPU, exactly `dtype`."""
    distribution = FLOAT_DISTRIBUTIONS.get(name)
    if distribution is None:
        known = ", ".join(FLOAT_DISTRIBUTIONS)
        raise UsageError(f"unknown float distribution {name!r}; choose one of: {known}")
    if not dtype.is_floating_point:
        raise UsageError(
            f"float distribution {name!r} cannot fill a tensor of dtype {dtype}; "
            "declare the input with a floating dtype (or as an IndexInput or MaskInput)"
        )
    return distribution.sample(tuple(shape), dtype, generator).to(dtype)
