"""The next probe's large draws, made while the candidate's worker runs this one.

An audit's main thread makes a case (draws its inputs, computes the float64 truth), sends it to
the worker, waits for the reply and judges it, one probe after another: while the worker runs,
the auditor waits, and while the auditor draws, the worker waits. On an H200 the inputs
kernelaudit draws itself were 15% of the main thread of an audit of SOL-ExecBench L1/092, most
of it drawn while the worker sat idle. `DrawsAhead` draws the next probe's large inputs in a
thread of its own while the worker runs, and puts them where `materialize` looks first (the
kept draws, `inputs.reuse`), so the next case takes them as drawn.

The values are the same bits: a draw depends on its key alone (the seed, the input, the
distribution, the shape and the dtype; its generator is its own), whichever thread makes it.
Only the draws `materialize` keeps are made ahead (those of at least `reuse.SMALLEST`
elements); the rest is drawn where it always was. The thread runs only while the main thread
waits on the worker (`settle` is called before anything else happens), so it never overlaps the
float64 truth, which switches torch's default dtype for the whole process. A draw that fails
ahead is not kept, and is made again, failing where it always did.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import torch

from kernelaudit.inputs.case import Case
from kernelaudit.inputs.layouts import expand_dim
from kernelaudit.inputs.materialize import (
    ARGMAX,
    GENERATOR,
    default_distribution,
    distributions_for,
    input_shape,
    keyed_draw,
)
from kernelaudit.inputs.recorded import is_recorded
from kernelaudit.inputs.reuse import DRAWS, SMALLEST, Draws
from kernelaudit.problem.spec import Problem, TensorInput

KeyedDraw = tuple[Hashable, Callable[[], torch.Tensor]]


def own_draws(problem: Problem, case: Case) -> list[tuple[KeyedDraw, int]]:
    """The floating draws `materialize(problem, case)` makes through the kept draws (plain
    layouts, kernelaudit's own distributions), each with its size in bytes; a case
    `materialize` would refuse gives none (it is refused where it is made)."""
    if case.rows is not None:  # a window of a whole case, which draws the whole first
        return own_draws(problem, replace(case, rows=None))
    configs = problem.dtype_configs()
    if not 0 <= case.dtype_config < len(configs):
        return []
    config, sizes = configs[case.dtype_config], case.size_map()
    draws = []
    for inp in problem.inputs:
        if not isinstance(inp, TensorInput):
            continue
        distribution = case.value_of(inp.name, default_distribution(inp, problem))
        if is_recorded(distribution) or distribution in (GENERATOR, ARGMAX):
            continue
        if distribution not in distributions_for(inp, problem):
            continue
        if not inp.domain.admits(distribution):
            continue
        try:
            shape = input_shape(inp, sizes, case)
        except Exception:  # refused where the case is made, with the reason
            continue
        layout = case.layout_of(inp.name)
        if layout == "broadcast" or (layout == "expanded" and expand_dim(shape) is not None):
            continue  # drawn narrow and expanded where the case is made
        dtype = config[inp.name]
        if math.prod(shape) >= SMALLEST:
            keyed = keyed_draw(inp, distribution, shape, dtype, case, 0)
            draws.append((keyed, math.prod(shape) * dtype.itemsize))
    return draws


class DrawsAhead:
    """Draws made in a thread of their own, kept in `draws` once settled."""

    def __init__(self, draws: Draws = DRAWS) -> None:
        self.draws = draws
        self.most_bytes = draws.most_bytes // 4
        """The most one round draws ahead: a quarter of what the kept draws may hold, so the
        next case's draws never push out more than a quarter of the kept ones."""
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[tuple[Hashable, Future[torch.Tensor]]] = []

    def start(self, problem: Problem, cases: Iterable[Case]) -> int:
        """Start drawing the cases' large draws that are not kept already; returns how many
        were started (none while an earlier round is unsettled)."""
        if self._pending:
            return 0
        planned: dict[Hashable, Callable[[], torch.Tensor]] = {}
        total = 0
        for case in dict.fromkeys(cases):
            for (key, draw), size in own_draws(problem, case):
                try:
                    known = key in planned or self.draws.holds(key)
                except TypeError:
                    continue  # a declaration holding an unhashable value: never kept
                if known or total + size > self.most_bytes:
                    continue
                planned[key] = draw
                total += size
        if not planned:
            return 0
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="draw-ahead")
        self._pending = [(key, self._pool.submit(draw)) for key, draw in planned.items()]
        return len(self._pending)

    def settle(self) -> None:
        """Wait for the round started, and keep what it drew."""
        pending, self._pending = self._pending, []
        for key, future in pending:
            if future.exception() is None:
                drawn = future.result()
                self.draws.get(key, lambda drawn=drawn: drawn)

    def close(self) -> None:
        self.settle()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
