"""What a case costs to run, estimated before it runs.

An audit plans to a time budget from these estimates, never from the clock: the set of cases
an audit runs, and so its verdict, must not depend on how busy the host happens to be. The
estimate is a fixed cost per call (the round trip to the candidate's worker, the reference's
launch, judging) plus a cost per element of the case's inputs and outputs (drawing the inputs
on the host, the float64 and native reference runs, moving tensors to the worker and back,
the float64 comparison). Both come from least-squares fits of the numerics probes' seconds
against their elements (docs/benchmarks.md, `benchmarks/cost_fit.py`): on the 2-core CPU, 518
probes of the bundled examples (2026-11-26: 0.196 s per call, 225 ns per element); on a GPU,
4,254 probes of 100 SOL-ExecBench problems audited one at a time on H200s (2026-11-28/29,
judging on the device: 0.025 s and 5.5 ns through the medians of the sizes, rounded up to
0.04 s and 8 ns for the probes of other checks, which make more calls and compare more). On a
GPU an audit's probing also costs about 3 s that no probe's calls explain (the first calls'
lazy start-up of the device's libraries, in the worker and in the auditor): whole audits'
probing phases on an H200 came to 3.1 s plus 0.76 times the probes' estimate (2026-11-29).
They need to be right within a factor of two, not exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from kernelaudit.inputs.case import Case
from kernelaudit.problem.dims import resolve_shape
from kernelaudit.problem.spec import Problem


@dataclass(frozen=True)
class CostModel:
    """Seconds per call and per element, for one kind of device, and per audit: what its
    probing costs besides its probes' calls."""

    per_call_s: float
    per_element_s: float
    per_audit_s: float = 0.0
    required_share: float = 1.0
    """Of the budget, the seconds the planner's shares that decide what every audit runs (the
    value variants, the workloads, the calls around the base workload, one case's calls:
    `checks.sweep.required_budget`) are taken of. Those shares were set when the GPU's
    estimates ran about four times what its probes took; refitted, the GPU's model counts a
    quarter of the budget for them (0.24, the ratio of the constants), so that the probes every
    audit runs stay the ones it ran (docs/benchmarks.md, seventeenth pass) and only the
    optional ones gain."""

    timed_rerun_s: float = 0.0
    """What a probe run again to shrink a finding costs besides its calls, per step that is
    timed: the timed repetitions, the profiler's run and the auditor's clock. Not in the plan's
    estimates, whose constants were fitted on whole audits that timed their candidates (once
    an audit, in `per_audit_s` and the fit), but a shrinking rerun of a timing finding times
    again at every simpler case: on an H200, 0.5 to 3.8 s a rerun, the median 1.7 s, where the
    model counted one call's 0.04 s (docs/benchmarks.md, "Shrinking a finding's echo"); on a
    2-core CPU about 0.4 s a rerun of a tiny case, 0.2 s of it past the call."""

    def seconds(self, elements: int, calls: int = 1) -> float:
        return calls * (self.per_call_s + elements * self.per_element_s)


GPU = CostModel(
    per_call_s=0.04, per_element_s=8e-9, per_audit_s=3.0, required_share=0.24, timed_rerun_s=1.7
)
CPU = CostModel(per_call_s=0.2, per_element_s=225e-9, timed_rerun_s=0.2)
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


def output_sizes(problem: Problem, case: Case) -> list[tuple[int | None, int]]:
    """Each declared output's elements at `case` (None where its sizes do not bind them) and
    the bytes of one element at its own dtype."""
    config = problem.dtype_configs()[case.dtype_config]
    counts = tensor_elements(problem, case.size_map())[len(problem.tensor_inputs) :]
    return [
        (count, problem.output_dtype(spec, config).itemsize)
        for spec, count in zip(problem.outputs, counts, strict=True)
    ]


def input_bytes(problem: Problem, case: Case) -> int:
    """Bytes of the case's tensor inputs at their dtypes (float64 where the case's dtype
    configuration names none), before any is made; shapes the case's sizes do not bind count
    nothing."""
    return sum(count * itemsize for count, itemsize in _input_sizes(problem, case) if count)


def result_sizes(problem: Problem, case: Case) -> list[tuple[int | None, int]]:
    """What one call's results at `case` hold once they come back: each declared output and
    each input the contract lets the call write (sent back after every call), as
    `output_sizes` gives them."""
    written = problem.contract.mutates
    inputs = zip(problem.tensor_inputs, _input_sizes(problem, case), strict=True)
    return output_sizes(problem, case) + [s for spec, s in inputs if spec.name in written]


def _input_sizes(problem: Problem, case: Case) -> list[tuple[int | None, int]]:
    """Each tensor input's elements at `case` (None where its sizes do not bind them) and the
    bytes of one element at its dtype (float64 where the configuration names none)."""
    config = problem.dtype_configs()[case.dtype_config]
    counts = tensor_elements(problem, case.size_map())
    return [
        (count, (config.get(spec.name) or torch.float64).itemsize)
        for spec, count in zip(problem.tensor_inputs, counts, strict=False)
    ]
