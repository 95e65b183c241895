"""Seeded random draws that use the audit's share of the cores for large tensors.

A CPU generator fills one tensor on one core: drawing the inputs of a workload of tens of
millions of elements took seconds of an audit's time. A tensor of more than `CHUNK` elements
is filled in pieces of `CHUNK` elements: the first from the case's own generator, exactly as a
small tensor is, each further one from a generator of its own seeded by a draw of the case's
generator. The pieces are filled in threads (torch releases the interpreter's lock while it
fills), and the values depend on the seed alone, never on how many threads there are.

A benchmark's own input generator (SOL-ExecBench's `get_inputs`, KernelBench's) calls
`torch.randn` and `torch.rand` itself, on one core, from the global generator: inside
`spread_global_draws` those calls are drawn the same way, on several cores.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

CHUNK = 1 << 22
"""Elements one generator fills. Tensors up to this size are drawn as torch draws them."""

Fill = Callable[[torch.Tensor, torch.Generator], object]
"""Fills a contiguous 1-D tensor in place from a generator."""


def randn(
    shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """N(0, 1): `torch.randn(shape, generator=generator, dtype=dtype)` up to `CHUNK`
    elements."""
    return _filled(shape, dtype, generator, lambda t, g: t.normal_(generator=g))


def rand(
    shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """U[0, 1): `torch.rand(shape, generator=generator, dtype=dtype)` up to `CHUNK`
    elements."""
    return _filled(shape, dtype, generator, lambda t, g: t.uniform_(generator=g))


def from_global() -> torch.Generator:
    """A CPU generator seeded by one draw of torch's global generator: for draws a caller
    seeds through the global generator (as benchmarks do), made on several cores."""
    generator = torch.Generator(device="cpu")
    generator.manual_seed(int(torch.randint(1 << 32, (), dtype=torch.int64)))
    return generator


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

    workers = max(1, min(pieces, torch.get_num_threads()))
    if workers == 1:
        for k in range(pieces):
            piece(k)
        return out
    with ThreadPoolExecutor(workers, thread_name_prefix="draw") as pool:
        list(pool.map(piece, range(pieces)))
    return out


_GLOBAL_FILLS: dict[Callable[..., Any], Fill] = {
    torch.randn: lambda t, g: t.normal_(generator=g),
    torch.rand: lambda t, g: t.uniform_(generator=g),
}
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
        return _filled(shape, dtype, from_global(), fill)


@contextmanager
def spread_global_draws() -> Iterator[None]:
    """Inside, a plain `torch.randn(*size)` or `torch.rand(*size)` on the host of more than
    `CHUNK` elements is drawn on several cores, as `randn(size, from_global(), dtype)` draws
    it: its values depend on the global generator's seed alone, as torch's own do, but are not
    torch's. Smaller draws, and draws given a generator, an output, another device or layout,
    are torch's own, bit for bit. For the benchmarks' input generators: SOL-ExecBench L1/001's
    took 12.5 s a call at its largest workload on one core, 3.9 s on an H100 host's cores."""
    with _SpreadDraws():
        yield
