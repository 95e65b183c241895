"""The same case with every input moved by one rounding: what a correct kernel cannot do better
than there.

Some cases are ill-conditioned at the precision their inputs are given in, or exact only by
their structure:
- a softmax backward whose upstream gradient is constant computes `y * (g - sum(g * y))`, a
  difference that cancels to the rounding residue of `sum(y)`: every implementation at the
  working precision, the reference's included, loses all of that result's bits, and the truth
  itself moves by about its own size when the inputs move by one rounding;
- a LayerNorm of a constant row has a variance of exactly zero, so a two-pass reference gets it
  exactly while an equally correct single-pass kernel is off by its mean's rounding divided by
  `sqrt(eps)`: judged against a baseline error of zero, any rounding looks infinitely worse.

Moving every floating input element to a neighbouring representable value (one unit in the last
place up or down, the sign drawn per element from a fixed seed) breaks such structure without
changing what the case asks. On that nudged case the oracle learns two things
(`oracle.compare`): how far the truth moved (the result's sensitivity to its inputs' precision),
and how far the reference at native precision is from the nudged truth (the error a correct
kernel makes on a case just like this one, with no exact structure to lean on). A result
within `RATIO_LIMIT` of either is as good as the precision allows. Well-conditioned cases have
both far below the noise floor, so nothing changes there; the nudged case is computed only for a
result that would otherwise fail on its error.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernelaudit.device_copies import moved
from kernelaudit.inputs import draws

NUDGE_SEED = 0x6E75
"""The seed of the nudges' signs: fixed, so verdicts do not depend on the run."""


@dataclass(frozen=True)
class Nudged:
    """One compared result of the nudged case."""

    truth: torch.Tensor
    """The reference in float64 on the nudged inputs."""
    baseline: torch.Tensor
    """The reference at the inputs' native dtypes on the same nudged inputs."""


def nudged(value: object, position: int) -> object:
    """A floating tensor (at its native dtype) with every element moved by about one unit in
    the last place (times 1 +/- eps, rounded back), up or down by a sign drawn for the input at
    `position` (so two inputs of one shape are not nudged alike); zeros stay zero; any other
    value as it is.

    The signs are drawn on the host (large tensors on several cores, `inputs.draws`) and the
    arithmetic runs where `value` is: every step is exact or correctly rounded, so a tensor
    nudged on a GPU holds the bits it would on the CPU."""
    if not isinstance(value, torch.Tensor) or value.numel() == 0:
        return value
    if not (value.dtype.is_floating_point or value.dtype.is_complex):
        return value
    real = value.dtype.to_real() if value.dtype.is_complex else value.dtype
    eps = torch.finfo(real).eps
    generator = torch.Generator().manual_seed(NUDGE_SEED + position)
    signs = draws.randint(0, 2, tuple(value.shape), generator, dtype=torch.uint8)
    factor = 1.0 + eps * (2.0 * moved(signs, value.device, torch.float64) - 1.0)
    del signs
    wide = torch.complex128 if value.dtype.is_complex else torch.float64
    return value.to(wide).mul_(factor).to(value.dtype)
