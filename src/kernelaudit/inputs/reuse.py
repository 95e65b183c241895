"""Large draws kept for reuse: an input drawn the same way twice is drawn once.

An input's values depend on nothing but the case's seed, the input's declaration (its name
seeds its generator: `materialize.input_generator`), the distribution, the shape, the dtype
and, for ids, their bound. A layer's weights, whose shape no batch axis changes, are therefore
the same tensor in every case of an audit that draws them by default, and drawing them is most
of what making a case of a large model's layer costs (seconds per billion elements on many
cores). So a large draw is kept, and every case that asks for it again gets the kept tensor
itself: bit for bit what drawing it again would give. Copying it for each case cost a mixture of
experts' audit a sixth of its time (4 GB of weights copied for each of some sixty cases). What
is given out is never written to: the trusted side copies a case's inputs wherever it changes
them (to the device, into the worker's shared region, nudged by a rounding). Should anything
write to a kept draw all the same (its version counter moves), the next case that asks for it
gets it drawn afresh, so a write reaches at most the cases already made with it.

A problem's own input generator (SOL-ExecBench's `get_inputs`, KernelBench's) is kept the same
way: its values depend on nothing but the sizes and the seed it is called with, and most cases
of an audit call it at the same workload and seed (differing in the values kernelaudit draws for
the other inputs). SOL-ExecBench L1/001's generator took half a second a call on an H100 host,
84 calls in one `default` audit, for 19 sets of values. And at each of the other sizes an audit
tries, the generator draws its layer's weights again, whose shapes no batch axis changes: each
draw it makes from the global generator is kept too, by the seed it got there, its shape and
dtype (`draws.kept_from_global`), so the weights are drawn once. SOL-ExecBench L1/092's
generator at the eleven sizes of a `default` audit took 7.2 s on a 2-core host, and 1.8 s so
(`benchmarks/generator_sizes.py`).

Only tensors of at least `SMALLEST` elements are kept, at most `limit_bytes()` of them in all
(a sixteenth of the machine's memory, at most 8 GiB), the least recently used dropped first,
except that the draws of one case (`Draws.together`, around making a case) never push out each
other. A case whose draws are more than the kept draws can hold would otherwise keep none:
SOL-ExecBench L1/044's generator draws three weights of 7 GiB each, in the same order for
every case of the first workload; with room for one, each draw pushed out the one before, the
next case found none of them kept and drew all three again (25-35 s a case on an H200's host).
Now the first is kept for every case, and the others are drawn as before. A draw may push out
what was drawn while it was being made (a generator's values hold everything its draws led
to), and a draw dropped or left unkept lately may push out the draws its case made rather than
found kept (a layer's weight drawn after activations that change with the batch size: plain
least-recently-used order again).

Each tensor given out is remembered with the draw it holds (`Draws.origin`), for as long as it
lives and is not written to: the trusted side keeps a kept draw's copy on the device once
(`oracle.resident`) instead of copying each case's weights there again.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import torch

Kept = TypeVar("Kept", torch.Tensor, dict[str, object])
"""A draw, or the values a problem's generator gives (tensors and scalars by name)."""

SMALLEST = 1 << 20
"""Elements below which a draw is made again rather than kept: it costs about what a copy does."""

_MOST_BYTES = 8 << 30

_GONE_KEYS = 256
"""How many of the keys most recently dropped or left unkept are remembered (`Draws.together`)."""


def limit_bytes() -> int:
    """How many bytes of draws are kept at most: a sixteenth of the machine's memory, at most
    8 GiB."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0
    return min(_MOST_BYTES, memory // 16)


class Draws:
    """Kept draws by what decides their values (see the module's docstring)."""

    def __init__(self, most_bytes: int) -> None:
        self.most_bytes = most_bytes
        self._kept: OrderedDict[Hashable, torch.Tensor | dict[str, object]] = OrderedDict()
        self._versions: dict[Hashable, tuple[int, ...]] = {}
        self._bytes = 0
        self._given: dict[int, tuple[weakref.ref[torch.Tensor], Hashable, int]] = {}
        self._lock = threading.Lock()
        """Held while the kept draws change or are read, never while a draw is made."""
        self._scope = threading.local()
        """`keys`: (key, found kept) for each draw kept or given out since this thread entered
        `together`, in order; None outside."""
        self._gone: OrderedDict[Hashable, None] = OrderedDict()
        """The keys most recently dropped or left unkept (at most `_GONE_KEYS`)."""

    def __len__(self) -> int:
        return len(self._kept)

    @contextmanager
    def together(self) -> Iterator[None]:
        """Inside (one case being made), a draw kept or given out is not pushed out by another
        made inside, except by one it was made for (a generator's values by the draws the
        generator made), or, where it was drawn in this scope rather than found kept, by a
        draw that was itself dropped or left unkept lately (a layer's weight at every batch
        size, drawn after activations that change with it). Entered again inside, it is the
        same scope; each thread has its own (a concluding check makes its cases beside the
        probes')."""
        if self._together() is not None:
            yield
            return
        self._scope.keys = []
        try:
            yield
        finally:
            self._scope.keys = None

    def _together(self) -> list[tuple[Hashable, bool]] | None:
        return getattr(self._scope, "keys", None)

    def get(
        self, key: Hashable, draw: Callable[[], Kept], names: Collection[str] | None = None
    ) -> Kept:
        """What is kept under `key` (the kept tensors themselves: never write to them), or
        `draw()`'s, kept when its tensors are large enough and room can be made for them. A
        key that cannot be hashed (a declaration holding an unhashable value) is drawn every
        time, and so is a kept draw something wrote to since it was kept. For values by name
        (a generator's), `names` picks the entries the caller takes."""
        try:
            hash(key)
        except TypeError:
            return _picked(draw(), names)
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None and _versions(kept) != self._versions[key]:
                self._drop(key)  # written to: its values are no longer the draw's
                kept = None
            if kept is not None:
                self._kept.move_to_end(key)
                self._note(key, found=True)
                return self._given_out(key, _picked(kept, names))  # type: ignore[type-var]
        scope = self._together()
        inner = len(scope) if scope is not None else 0
        drawn = draw()
        tensors = _tensors(drawn)
        size = _nbytes(tensors)
        if sum(t.numel() for t in tensors) < SMALLEST or size > self.most_bytes:
            return _picked(drawn, names)
        with self._lock:
            if key in self._kept:  # drawn meanwhile in another thread: this one replaces it
                self._drop(key)
            if self._room_for(key, size, inner):
                self._kept[key] = drawn
                self._versions[key] = _versions(drawn)
                self._bytes += size
                self._gone.pop(key, None)
            else:
                self._went(key)  # its case's other draws stay kept instead
            self._note(key, found=False)
            # named either way: a copy of it kept on the device serves the next case too
            return self._given_out(key, _picked(drawn, names))

    def _room_for(self, key: Hashable, size: int, inner: int) -> bool:
        """Drop the least recently used draws until `size` more bytes fit, leaving those
        `together` holds for this draw (see there; its `inner` first keys were noted before
        this draw began); False, with nothing dropped, where that cannot make room."""
        scope = self._together() or []
        returning = key in self._gone
        held = {k for k, found in scope[:inner] if found or not returning}
        dropped, freed = [], 0
        for kept_key, kept in self._kept.items():
            if self._bytes - freed + size <= self.most_bytes:
                break
            if kept_key in held and _versions(kept) == self._versions[kept_key]:
                continue
            dropped.append(kept_key)
            freed += _nbytes(_tensors(kept))
        if self._bytes - freed + size > self.most_bytes:
            return False
        for kept_key in dropped:
            self._drop(kept_key)
        return True

    def _note(self, key: Hashable, found: bool) -> None:
        scope = self._together()
        if scope is not None:
            scope.append((key, found))

    def _went(self, key: Hashable) -> None:
        self._gone[key] = None
        self._gone.move_to_end(key)
        while len(self._gone) > _GONE_KEYS:
            self._gone.popitem(last=False)

    def holds(self, key: Hashable) -> bool:
        """Whether a draw is kept under `key`, unwritten since (what `get` would give as kept)."""
        try:
            hash(key)
        except TypeError:
            return False
        with self._lock:
            kept = self._kept.get(key)
            return kept is not None and _versions(kept) == self._versions[key]

    def _drop(self, key: Hashable) -> None:
        dropped = self._kept.pop(key)
        del self._versions[key]
        self._bytes -= _nbytes(_tensors(dropped))
        self._went(key)

    def origin(self, tensor: torch.Tensor) -> Hashable | None:
        """The draw `tensor` holds, if it is one this gave out and nothing has written to it
        since (its version counter unchanged): the same key wherever the same values were
        given, whether or not the draw is still kept. None for any other tensor."""
        given = self._given.get(id(tensor))
        if given is None:
            return None
        ref, key, version = given
        if ref() is not tensor or tensor._version != version:
            return None
        return key

    def _given_out(self, key: Hashable, kept: Kept) -> Kept:
        """`kept`, each tensor remembered with its origin (`origin`)."""
        if isinstance(kept, torch.Tensor):
            self._remember(kept, key)
        else:
            kept = dict(kept)  # the caller's own mapping; the tensors are the kept ones
            for name, value in kept.items():
                if isinstance(value, torch.Tensor):
                    self._remember(value, (key, name))
        return kept

    def _remember(self, given: torch.Tensor, key: Hashable) -> None:
        number = id(given)

        def forget(_: object, number: int = number) -> None:
            self._given.pop(number, None)

        self._given[number] = (weakref.ref(given, forget), key, given._version)


def _tensors(kept: torch.Tensor | dict[str, object]) -> list[torch.Tensor]:
    if isinstance(kept, torch.Tensor):
        return [kept]
    return [value for value in kept.values() if isinstance(value, torch.Tensor)]


def _picked(kept: Kept, names: Collection[str] | None) -> Kept:
    if names is None or isinstance(kept, torch.Tensor):
        return kept
    return {name: value for name, value in kept.items() if name in names}


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _versions(kept: Kept) -> tuple[int, ...]:
    """The version counters of the kept tensors: one moves with every write to its tensor."""
    return tuple(t._version for t in _tensors(kept))


DRAWS = Draws(limit_bytes())
"""The process's kept draws (`materialize` draws through it)."""
