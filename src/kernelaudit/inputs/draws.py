"""Seeded random draws that use the audit's share of the cores for large tensors.

Floating values come from NumPy's generators (`numpy.random.Generator` over `SFC64`), not
torch's: torch's CPU normal draw in float64 fills one element at a time (about 40 million a
second a core), and in float16 and bfloat16 its values depend on the CPU's vector instructions
(the same seed gave other bits with `ATEN_CPU_CAPABILITY=default` than with AVX2) and ran at 22
million a second a core on an H200's host. NumPy's ziggurat drew float64 normals there at about
twice torch's speed, half-precision ones (drawn in float32 and rounded) at 2.5 times, and its
values depend on the seed alone on every platform.

A tensor is filled in pieces of at most `CHUNK` elements, each from a generator of its own
seeded by one draw of the case's torch generator (`seeds`), in threads (NumPy releases the
interpreter's lock while it fills): the values depend on the seed alone, never on how many
threads there are. Integer draws (`randint`) stay torch's: up to `CHUNK` elements exactly
`torch.randint`'s, further pieces from torch generators seeded the same way.

A benchmark's own input generator (SOL-ExecBench's `get_inputs`, KernelBench's) calls
`torch.randn` and `torch.rand` itself, on one core, from the global generator: inside
`spread_global_draws` its large draws are made the same way, on several cores, and kept for
the next call at other sizes that draws the same seed and shape (`kept_from_global`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from kernelaudit.inputs.reuse import DRAWS

CHUNK = 1 << 22
"""Elements one generator fills."""


Fill = Callable[[torch.Tensor, torch.Generator], object]
"""Fills a contiguous 1-D tensor in place from a torch generator (integer draws)."""

FloatFill = Callable[[np.ndarray, np.random.Generator], object]
"""Fills a contiguous 1-D float32 or float64 array in place from a NumPy generator."""

_NATIVE = frozenset({torch.float64, torch.float32})
"""The dtypes NumPy fills in place; others are drawn in float32 and rounded."""


def _normal(out: np.ndarray, generator: np.random.Generator) -> None:
    generator.standard_normal(out=out, dtype=out.dtype)


def _uniform(out: np.ndarray, generator: np.random.Generator) -> None:
    generator.random(out=out, dtype=out.dtype)


def randn(
    shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """N(0, 1) at `dtype`, its values decided by `generator`'s state alone."""
    return _floats(shape, dtype, generator, _normal)


def rand(
    shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """U[0, 1) at `dtype`, its values decided by `generator`'s state alone."""
    return _floats(shape, dtype, generator, _uniform)


def from_global() -> torch.Generator:
    """A CPU generator seeded by one draw of torch's global generator: for draws a caller
    seeds through the global generator (as benchmarks do), made on several cores."""
    return _seeded(_global_seed())


def kept_randn(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """`randn(shape, from_global(), dtype)`, a large one kept (`kept_from_global`)."""
    return kept_from_global(shape, dtype, _normal)


def kept_rand(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """`rand(shape, from_global(), dtype)`, a large one kept (`kept_from_global`)."""
    return kept_from_global(shape, dtype, _uniform)


def kept_from_global(shape: tuple[int, ...], dtype: torch.dtype, fill: FloatFill) -> torch.Tensor:
    """The floating draw of `shape` a generator seeded by one draw of the global generator
    (`from_global`) makes. Its values depend on that seed, the shape, the dtype and the
    distribution alone, so a large one is kept (`inputs.reuse`) and the next call that draws
    the same seed and shape gets the kept tensor itself: a benchmark's generator, called at
    each of the sizes an audit tries with the same seed, draws its layer's weights (whose
    shapes no batch axis changes) at the same place in the global generator's sequence every
    time, and drew them again at every size. Never write to what this returns."""
    seed = _global_seed()
    key = ("drawn from the global generator", fill.__name__, seed, shape, dtype)
    return DRAWS.get(key, lambda: _floats(shape, dtype, _seeded(seed), fill))


def _global_seed() -> int:
    return int(torch.randint(1 << 32, (), dtype=torch.int64))


def _seeded(seed: int) -> torch.Generator:
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    return generator


def seeds(generator: torch.Generator, count: int) -> list[int]:
    """`count` seeds for generators of their own, drawn from `generator`."""
    return torch.randint(1 << 62, (count,), generator=generator, dtype=torch.int64).tolist()


def _floats(
    shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator, fill: FloatFill
) -> torch.Tensor:
    if not dtype.is_floating_point:
        raise TypeError(f"floating draws cannot fill a tensor of dtype {dtype}")
    out = torch.empty(shape, dtype=dtype)
    flat = out.view(-1)
    pieces = math.ceil(flat.numel() / CHUNK)
    if pieces == 0:
        return out
    own = seeds(generator, pieces)
    native = dtype in _NATIVE

    def piece(k: int) -> None:
        part = flat[k * CHUNK : (k + 1) * CHUNK]
        numpy_generator = np.random.Generator(np.random.SFC64(own[k]))
        if native:
            fill(part.numpy(), numpy_generator)
            return
        drawn = np.empty(part.numel(), dtype=np.float32)
        fill(drawn, numpy_generator)
        part.copy_(torch.from_numpy(drawn))
        if fill is _uniform:
            # rounding to a short mantissa would turn values near 1 into 1.0: the largest
            # value below 1 in the dtype keeps the interval half-open
            part.clamp_(max=1.0 - torch.finfo(dtype).eps / 2)

    _in_threads(piece, pieces)
    return out


def randint(
    low: int,
    high: int,
    shape: tuple[int, ...],
    generator: torch.Generator,
    dtype: torch.dtype = torch.int64,
) -> torch.Tensor:
    """Integers in [low, high): `torch.randint(low, high, shape, generator=generator)` up to
    `CHUNK` elements, stored as `dtype` (the same values in a narrower one, where they fit)."""
    return _filled(shape, dtype, generator, lambda t, g: t.random_(low, high, generator=g))


def _filled(
    shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator, fill: Fill
) -> torch.Tensor:
    out = torch.empty(shape, dtype=dtype)
    flat = out.view(-1)
    fill(flat[:CHUNK], generator)
    pieces = math.ceil(flat.numel() / CHUNK) - 1
    if pieces <= 0:
        return out
    # the CPU generator keeps 32 bits of its seed
    seeds = torch.randint(1 << 32, (pieces,), generator=generator, dtype=torch.int64).tolist()

    def piece(k: int) -> None:
        own = torch.Generator(device="cpu")
        own.manual_seed(seeds[k])
        fill(flat[(k + 1) * CHUNK : (k + 2) * CHUNK], own)

    _in_threads(piece, pieces)
    return out


def _in_threads(piece: Callable[[int], None], pieces: int) -> None:
    """`piece(k)` for every k below `pieces`, on this process's share of the cores."""
    workers = max(1, min(pieces, torch.get_num_threads()))
    if workers == 1:
        for k in range(pieces):
            piece(k)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="draw") as pool:
        list(pool.map(piece, range(pieces)))


_GLOBAL_FILLS: dict[Callable[..., Any], FloatFill] = {torch.randn: _normal, torch.rand: _uniform}
_PLAIN = frozenset({"dtype", "device", "layout", "requires_grad", "pin_memory"})
"""The keywords a plain draw may be given (a generator or an output makes it one of its own)."""


def _plain_shape(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The shape of a `torch.randn(*size, dtype=..., device="cpu")` call with nothing else
    given (no generator, output, layout, gradient or pinning of its own); None otherwise."""
    if not _PLAIN.issuperset(kwargs) or kwargs.get("requires_grad") or kwargs.get("pin_memory"):
        return None
    if kwargs.get("layout", torch.strided) != torch.strided:
        return None
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return None
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    if not dtype.is_floating_point:
        return None
    size = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
    if not all(type(n) is int and n >= 0 for n in size):
        return None
    return tuple(size)


class _SpreadDraws(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        fill = _GLOBAL_FILLS.get(func)
        shape = None if fill is None else _plain_shape(tuple(args), kwargs)
        if fill is None or shape is None or math.prod(shape) <= CHUNK:
            return func(*args, **kwargs)
        dtype = kwargs.get("dtype") or torch.get_default_dtype()
        # the generator's own tensor: its code may write into what it drew
        return kept_from_global(shape, dtype, fill).clone()


@contextmanager
def spread_global_draws() -> Iterator[None]:
    """Inside, a plain `torch.randn(*size)` or `torch.rand(*size)` on the host of more than
    `CHUNK` elements is drawn on several cores, as `randn(size, from_global(), dtype)` draws
    it: its values depend on the global generator's seed alone, as torch's own do, but are not
    torch's. Smaller draws, and draws given a generator, an output, another device or layout,
    are torch's own, bit for bit: the values the benchmark's own harness draws (KernelBench's
    draws its inputs on the host), with torch's dependence on the CPU's vector instructions
    below float64. For the benchmarks' input generators: SOL-ExecBench L1/001's
    took 12.5 s a call at its largest workload on one core, 3.9 s on an H100 host's cores."""
    with _SpreadDraws():
        yield
