"""The judging's kernels loaded on the device before the first result is judged.

CUDA loads a kernel the first time it is launched (lazy module loading, the default since
CUDA 11.7), so an auditor's first comparison on a GPU pays for every kernel the comparison
uses: on an H200, a first comparison of a million bfloat16 elements took 0.22-0.40 s and the
second 3-4 ms, and after a comparison of 1,024 elements the first took 3-4.5 ms as well
(`benchmarks/first_judgement.py`; docs/benchmarks.md, "Kernels loaded beside the first run").
In sampled `quick` audits of SOL-ExecBench L1 problems those first comparisons were the slowest
judging of the audit (the stale-memory check's first result, 0.16-0.47 s).

`warm_judging` makes a comparison of a few elements of each of the problem's result dtypes,
and one bit-for-bit check, so that those kernels are loaded; `engine.executor` runs it in a
thread of its own while the auditor waits for the worker's first run, where it costs nothing.
The tensors are its own: nothing it does is kept, held or seen by any judgement.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterable

import torch

from kernelaudit.engine import beside
from kernelaudit.oracle.compare import compare, is_exact
from kernelaudit.problem.spec import Problem
from kernelaudit.runner.boundary.guard import same_bits

ELEMENTS = 1024
"""How many elements each warm-up comparison judges."""


def warm_judging(device: torch.device, dtypes: Iterable[torch.dtype]) -> None:
    """Judge a few elements of each of `dtypes` on `device` (a GPU; nothing elsewhere, where
    there is nothing to load), against a float64 truth, as every check's judging does. A dtype
    whose warm-up fails is left to its first judgement, and the others are still warmed."""
    if device.type != "cuda":
        return
    for dtype in dict.fromkeys(dtypes):
        # the first judgement of such a result loads what this would have, and reports any
        # real error where it happens
        with contextlib.suppress(Exception):
            _judged(device, dtype)
    torch.cuda.synchronize(device)


def _judged(device: torch.device, dtype: torch.dtype) -> None:
    # small integers: finite in every floating dtype (float8's largest is 448), exact in every
    # integer one, the clean path every ordinary comparison takes
    truth = torch.arange(ELEMENTS, device=device, dtype=torch.float64).remainder(64)
    truth = truth.reshape(8, -1)
    if dtype.is_complex:
        truth = torch.complex(truth, truth)
    elif dtype == torch.bool:
        truth = truth.remainder(2)
    values = truth.to(dtype)
    compare("warm-up", values, truth.to(_truth_dtype(dtype)), values, dtype, device=device)
    same_bits(values, values.clone())


def _truth_dtype(dtype: torch.dtype) -> torch.dtype:
    if is_exact(dtype):
        return dtype
    return torch.complex128 if dtype.is_complex else torch.float64


def judged_dtypes(problem: Problem) -> list[torch.dtype]:
    """The dtypes the judging of `problem`'s results compares: every output's, and every input
    the contract lets a call write, under each of its dtype configurations."""
    configs = problem.dtype_configs()
    dtypes = [problem.output_dtype(out, c) for c in configs for out in problem.outputs]
    return dtypes + [c[name] for c in configs for name in problem.contract.mutates if name in c]


def warm_beside(device: torch.device, dtypes: Iterable[torch.dtype]) -> threading.Thread | None:
    """`warm_judging` started beside the audit (`engine.beside`: every measurement of the
    device waits for it), in a thread of its own; None where `device` is not a GPU. Join it
    before anything else runs on the device."""
    if device.type != "cuda":
        return None
    return beside.start(functools.partial(warm_judging, device, tuple(dtypes)), "judging-warm-up")
