"""What a case costs to run, estimated before it runs.

An audit plans to a time budget from these estimates, never from the clock: the set of cases
an audit runs, and so its verdict, must not depend on how busy the host happens to be. The
estimate is a fixed cost per call (the round trip to the candidate's worker, the reference's
launch, judging) plus a cost per element of the case's inputs and outputs (drawing the inputs
on the host, the float64 and native reference runs, moving tensors to the worker and back,
the float64 comparison). Both come from a least-squares fit of the numerics probes' seconds
against their elements (2026-11-26, docs/benchmarks.md): 518 probes of the bundled examples on
the 2-core CPU (0.196 s per call, 225 ns per element) and 798 probes of SOL-ExecBench problems
on H200s, three or four audits to a host (0.168 s, 33 ns). They need to be right within a
factor of two, not exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kernelaudit.inputs.case import Case
from kernelaudit.problem.spec import Problem, resolve_shape


@dataclass(frozen=True)
class CostModel:
    """Seconds per call and per element, for one kind of device."""

    per_call_s: float
    per_element_s: float

    def seconds(self, elements: int, calls: int = 1) -> float:
        return calls * (self.per_call_s + elements * self.per_element_s)


GPU = CostModel(per_call_s=0.17, per_element_s=33e-9)
CPU = CostModel(per_call_s=0.2, per_element_s=225e-9)
"""On a CPU, Triton kernels run through the interpreter, one program after another."""


def cost_model(device: str) -> CostModel:
    return GPU if device.startswith("cuda") else CPU


def case_elements(problem: Problem, sizes: Mapping[str, int]) -> int:
    """Elements of every tensor input and output at `sizes` (shapes that these sizes do not
    bind count as nothing)."""
    return sum(count or 0 for count in tensor_elements(problem, sizes))


def tensor_elements(problem: Problem, sizes: Mapping[str, int]) -> list[int | None]:
    """Elements of each tensor input, then each output, at `sizes`: None for a shape these
    sizes do not bind."""
    counts: list[int | None] = []
    for spec in (*problem.tensor_inputs, *problem.outputs):
        try:
            shape = resolve_shape(spec.shape, sizes)
        except (KeyError, ValueError, TypeError):
            counts.append(None)
            continue
        count = 1
        for size in shape:
            count *= max(int(size), 0)
        counts.append(count)
    return counts


def case_seconds(problem: Problem, case: Case, device: str, calls: int = 1) -> float:
    """The estimated seconds of `calls` calls of the candidate on `case`."""
    return cost_model(device).seconds(case_elements(problem, case.size_map()), calls)
