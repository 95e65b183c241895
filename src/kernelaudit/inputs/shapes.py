"""Boundary sizes: the axis sizes where tiled kernels break, beyond the sizes users run.

Benchmarks use power-of-two workloads, which are exactly the sizes where every tile is full and
every grid divides evenly. The sizes here are the ones next to them, bounded so a boundary case
never costs much more than the workload it departs from.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from kernelaudit.problem.spec import Axis, Problem

FILLER_STEPS = 64
"""How far (in steps of the axis's multiple) the last-resort walk around the workload goes."""


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    factor = 3
    while factor * factor <= n:
        if n % factor == 0:
            return False
        factor += 2
    return True


def _prime_below(n: int) -> int | None:
    """The largest prime strictly below n."""
    for candidate in range(n - 1, 1, -1):
        if _is_prime(candidate):
            return candidate
    return None


def _prime_above(n: int) -> int:
    """The smallest prime strictly above n."""
    candidate = max(n + 1, 2)
    while not _is_prime(candidate):
        candidate += 1
    return candidate


Candidate = tuple[tuple[int, ...], str]
"""Alternatives in preference order (the first usable one is taken) and the rounding direction
("up" or "down") toward a multiple of the axis's `multiple_of`."""


def _candidates(axis: Axis, workload: int, cap: int, sm_count: int) -> Iterator[Candidate]:
    multiple = max(axis.multiple_of, 1)
    # The smallest size the axis admits (1 for most axes): one row, one element, a grid of one
    # program; loops that assume at least one full tile and reductions of length 1 break here.
    yield (max(axis.min, 1),), "up"

    # One past a power-of-two block size (17, 33, ..., 1025, ...): a final tile with a single
    # live element, where a missing tail mask reads or writes out of bounds. The largest such
    # size under the cap is tried first, since kernels often switch block size with the size.
    past_blocks = [2**k + 1 for k in range(cap.bit_length(), 0, -1) if 2**k + 1 <= cap]
    yield tuple(past_blocks), "up"

    # A prime below both the workload and the SM count: fewer rows than the GPU has SMs, so a
    # persistent or split kernel sized for a full wave leaves programs with no work, and a prime
    # divides into no block size.
    small_prime = _prime_below(min(workload, sm_count))
    if small_prime is not None:
        yield (small_prime,), "down"

    # One below a power of two, near the workload: every tile full but the last, which misses
    # one element; the size a kernel hard-coded for the workload is most likely to mishandle.
    low_powers = [2**k - 1 for k in range(1, workload.bit_length() + 2)]
    low_powers.sort(key=lambda size: (abs(math.log2((size + 1) / max(workload, 1))), size))
    yield tuple(low_powers[:3]), "down"

    # Other primes: next to the workload on either side, at half and one and a half times it,
    # and a few smaller than a warp or a vector width.
    yield (_prime_below(workload) or 2,), "down"
    yield (_prime_above(workload),), "up"
    yield (3,), "up"
    yield (7,), "up"
    yield (_prime_below(workload // 2) or 2,), "down"
    yield (_prime_above(workload * 3 // 2),), "up"
    yield (5,), "up"
    yield (2,), "up"

    # Last resort for axes whose multiple or limits reject everything above: walk outward
    # from the workload one multiple at a time.
    for step in range(1, FILLER_STEPS + 1):
        yield (workload - step * multiple,), "down"
        yield (workload + step * multiple,), "up"


def _admitted_near(axis: Axis, size: int, direction: str) -> tuple[int, ...]:
    """Admitted sizes standing in for `size`, preferred first."""
    multiple = max(axis.multiple_of, 1)
    if multiple == 1:
        return (size,) if axis.admits(size) else ()
    # Axes that only take multiples keep the intent of a candidate by rounding it to the
    # multiple on its side (one multiple past a block, one multiple short of a power of two).
    up = -(-size // multiple) * multiple
    down = size // multiple * multiple
    order = (up, down) if direction == "up" else (down, up)
    return tuple(s for s in order if axis.admits(s))


def boundary_sizes(axis: Axis, workload_size: int, count: int, sm_count: int = 132) -> list[int]:
    """Up to `count` distinct sizes for `axis` worth trying besides `workload_size`.

    Deterministic and in priority order. Every size is admitted by the axis, differs from the
    workload size and is at most max(2 * workload_size, 2).
    """
    cap = max(2 * workload_size, 2)
    chosen: list[int] = []
    if count <= 0:
        return chosen
    for alternatives, direction in _candidates(axis, workload_size, cap, sm_count):
        usable = (
            size
            for alternative in alternatives
            for size in _admitted_near(axis, alternative, direction)
            if 1 <= size <= cap and size != workload_size and size not in chosen
        )
        size = next(usable, None)
        if size is None:
            continue
        chosen.append(size)
        if len(chosen) == count:
            break
    return chosen


def shape_cases(
    problem: Problem, boundary_per_axis: int, sm_count: int, base: str = ""
) -> list[tuple[dict[str, int], str]]:
    """Size maps to run, with where each came from.

    Every workload first (labelled with its name), the `base` workload (by name; the first
    listed when none is named) ahead of the others, then, around the base workload, each axis
    at its boundary sizes with the other axes held at the workload's sizes. A size map that
    repeats an earlier one is dropped, keeping the earlier label.
    """
    cases: list[tuple[dict[str, int], str]] = []
    seen: set[tuple[tuple[str, int], ...]] = set()

    def add(sizes: dict[str, int], label: str) -> None:
        key = tuple(sorted(sizes.items()))
        if key not in seen:
            seen.add(key)
            cases.append((sizes, label))

    if not problem.workloads:
        return cases
    names = [workload.name for workload in problem.workloads]
    if base and base not in names:
        raise ValueError(f"no workload named {base!r} (workloads: {', '.join(names)})")
    first = problem.workloads[names.index(base) if base else 0]
    for workload in (first, *problem.workloads):
        add(workload.as_dict(), workload.name)
    around = first.as_dict()
    for axis in problem.axes:
        if axis.name not in around:
            continue
        for size in boundary_sizes(axis, around[axis.name], boundary_per_axis, sm_count):
            add({**around, axis.name: size}, f"boundary {axis.name}={size}")
    return cases


def held_back_sizes(problem: Problem) -> list[tuple[dict[str, int], str]]:
    """For every workload, a size map that no workload lists: every axis moved about a quarter
    up (odd where the axis allows), so a candidate that only handles the listed shapes, or
    treats them specially, meets sizes it could not have seen."""
    listed = {tuple(sorted(w.as_dict().items())) for w in problem.workloads}
    axes = {axis.name: axis for axis in problem.axes}
    found: list[tuple[dict[str, int], str]] = []
    for workload in problem.workloads:
        sizes = {}
        for name, size in workload.as_dict().items():
            axis = axes.get(name, Axis(name))
            wanted = size + max(1, size // 4) + (1 if size % 2 == 0 else 0)
            near = _admitted_near(axis, wanted, "up") + _admitted_near(axis, size, "up")
            sizes[name] = next((s for s in near if s != size), size)
        key = tuple(sorted(sizes.items()))
        if key not in listed and all(key != tuple(sorted(s.items())) for s, _ in found):
            found.append((sizes, f"held-back shape near {workload.name}"))
    return found


FAR_FACTOR = 4
"""How many times longer than at its workload the far-past shape makes one axis."""


def far_past_sizes(
    problem: Problem, sizes: Mapping[str, int], label: str, axes: tuple[str, ...]
) -> tuple[dict[str, int], str] | None:
    """`sizes` (a workload's) with the first of `axes` that admits it `FAR_FACTOR` times as long:
    a size well past every listed one, where a kernel that switches strategy past some size,
    overflows a small counter or indexes a fixed-size table goes wrong. None when no axis can
    grow that far."""
    declared = {axis.name: axis for axis in problem.axes}
    for name in axes:
        if name not in sizes:
            continue
        axis = declared.get(name, Axis(name))
        grown = _admitted_near(axis, sizes[name] * FAR_FACTOR, "down")
        if grown and grown[0] > sizes[name]:
            return {**sizes, name: grown[0]}, f"{label}, {name} x{FAR_FACTOR}"
    return None
