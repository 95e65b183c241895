"""Seeded random draws that use the audit's share of the cores for large tensors.

A CPU generator fills one tensor on one core: drawing the inputs of a workload of tens of
millions of elements took seconds of an audit's time. A tensor of more than `CHUNK` elements
is filled in pieces of `CHUNK` elements: the first from the case's own generator, exactly as a
small tensor is, each further one from a generator of its own seeded by a draw of the case's
generator. The pieces are filled in threads (torch releases the interpreter's lock while it
fills), and the values depend on the seed alone, never on how many threads there are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

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
    low: int, high: int, shape: tuple[int, ...], generator: torch.Generator
) -> torch.Tensor:
    """Integers in [low, high) as int64: `torch.randint(low, high, shape, generator=generator)`
    up to `CHUNK` elements."""
    return _filled(shape, torch.int64, generator, lambda t, g: t.random_(low, high, generator=g))


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
