"""Which calls of a guarded kernel are checked: adaptive sampling.

Every call is checked at first (the first calls are where a wrong kernel costs least to
catch, and where a user is watching); then a fraction `rate` of calls, drawn at random; always
a call whose arguments have a shape or dtype no checked call had (sizes past anything seen
before are where offsets overflow and masks break); and every call for a while after a
failure, so one failing call becomes a picture of how often it fails.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import dataclass, field

FIRST = "one of the first calls"
NEW = "a shape or dtype not seen before"
AFTER_FAILURE = "soon after a failure"
DRAWN = "drawn at the sampling rate"


@dataclass
class Sampler:
    """Decides, call by call, whether to check it.

    rate: the fraction of calls checked once past the first ones (0 to 1).
    first: how many calls are all checked at the start.
    after_failure: how many calls are all checked after each failing one.
    seed: the draws' seed (the same calls are sampled run after run).
    """

    rate: float
    first: int = 8
    after_failure: int = 16
    seed: int = 0
    calls: int = 0
    _seen: set[Hashable] = field(default_factory=set)
    _boosted: int = 0
    _draws: random.Random = field(init=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"the sampling rate is a fraction of calls, 0 to 1; got {self.rate}")
        if self.first < 0 or self.after_failure < 0:
            raise ValueError("the calls checked first and after a failure are counts, 0 or more")
        self._draws = random.Random(self.seed)

    def decide(self, signature: Hashable) -> str | None:
        """Why the next call (whose arguments have `signature`) is checked; None: it is not."""
        self.calls += 1
        drawn = self._draws.random() < self.rate  # drawn every call: the pattern stays fixed
        new = signature not in self._seen
        self._seen.add(signature)
        if self.calls <= self.first:
            return FIRST
        if new:
            return NEW
        if self._boosted > 0:
            self._boosted -= 1
            return AFTER_FAILURE
        return DRAWN if drawn else None

    def failed(self) -> None:
        """A checked call failed: check the calls that follow it."""
        self._boosted = self.after_failure
