"""The auditor's host memory: the shares it takes of the machine's, and what a case, a probe
and a run held for later probes keep alive there.

A case prepared for judging holds its inputs, its float64 truth and its baseline on the host,
and later its nudged case's pair (`oracle.conditioning`). One case, or the cases one probe
runs together with the worker's copies of their inputs and the candidate's results of its
calls, may take half of the machine's memory; the cases kept for the checks that run them
again an eighth. The candidate's processes may hold the other half
(`runner.auditor.limits.host_share`), their copy of the inputs included: counting that copy in the
auditor's half too leaves the other half for what the candidate makes itself, the shared regions and
the processes' own footprint, so both sides near their limits at once still fit the machine. Each is
estimated from the shapes before anything is made: a case past its share is not made, and the
auditor is not killed for memory without a report.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import torch

from kernelaudit.checks.base import Expected, Observation, Step
from kernelaudit.errors import CaseUnavailable
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import input_bytes, output_sizes, result_sizes
from kernelaudit.problem.spec import Problem
from kernelaudit.runner.auditor.limits import machine_memory

Prepared = tuple[dict[str, object], Expected]
"""A case's logical inputs and its trusted results."""


def cache_bytes() -> int:
    """Host memory the kept cases may take together: an eighth of the machine's (the most
    recent case is kept whatever its size). Sixteen cases of a mixture of experts, 4 GB of
    weights each, were more than half of a 128 GiB host, and the auditor was killed for
    memory."""
    return machine_memory() // 8


def host_room() -> int:
    """Host memory one case's inputs, truth and baseline may take, or those of the cases one
    probe runs together: half of the machine's."""
    return machine_memory() // 2


def estimated_bytes(problem: Problem, case: Case) -> int:
    """The host memory a case will hold once prepared, before it is: its inputs at their
    dtypes, its outputs in float64 (the truth) and at their own dtypes (the baseline); shapes
    the case's sizes do not bind count nothing."""
    outputs = output_sizes(problem, case)
    return input_bytes(problem, case) + sum(
        (8 + itemsize) * count for count, itemsize in outputs if count is not None
    )


def results_bytes(problem: Problem, case: Case) -> int:
    """The host memory one call's results at `case` take once they come back from the
    candidate: every output at its own dtype, and every input the contract lets it write
    (sent back after each call whatever happened to it)."""
    return sum(count * itemsize for count, itemsize in result_sizes(problem, case) if count)


def result_copies(step: Step) -> int:
    """How many sets of results a step's call sends back: its own where they are kept (only
    fingerprints otherwise), the last timed repetition's, and one per thread of a round."""
    return int(step.keep) + int(step.timed) + step.threads


def refuse_unfitting(
    problem: Problem, cases: list[Case], calls: Iterable[tuple[Case, int]] = ()
) -> None:
    """Raise CaseUnavailable where the distinct `cases` (one case, or those one probe runs: a
    shape held back and the workload beside it, say, each held while the probe runs), the
    worker's copies of the inputs of the candidate's `calls` (a case per call, with the sets
    of results it sends back, `result_copies`) and the results of those calls (they come
    back beside the truths) would not fit in `host_room` together. Two float64 truths of
    tens of GB, each within the room alone, had the auditor killed for memory, with no
    report; and so did a probe of two cases of a mixture of experts (22.5 GB of weights a
    case) whose truths fit, while the worker took a second copy of both cases' inputs as they
    crossed to it."""
    distinct, calls = list(dict.fromkeys(cases)), list(calls)
    trusted = sum(estimated_bytes(problem, case) for case in distinct)
    sent = sum(input_bytes(problem, case) for case in dict.fromkeys(case for case, _ in calls))
    results = sum(copies * results_bytes(problem, case) for case, copies in calls)
    needed, room = trusted + sent + results, host_room()
    if needed <= room:
        return
    parts = ["the worker's copy of their inputs"] if sent else []
    if results:
        parts.append(f"the candidate's results of the probe's {len(calls)} call(s)")
    what = f", with {' and '.join(parts)}," if parts else ""
    # where the auditor's own share fits, the worker's copy is what does not
    crossing = trusted + results <= room
    if len(distinct) == 1:
        raise CaseUnavailable(
            f"the inputs, float64 truth and baseline at {distinct[0].describe()}{what} "
            f"would take {needed / 2**30:.1f} GiB of host memory, more than the "
            f"{room / 2**30:.1f} GiB the auditor takes for one case (half of this machine's)",
            "the case's inputs do not fit in host memory twice, the auditor's and the worker's"
            if crossing
            else "the float64 truth does not fit in host memory",
        )
    raise CaseUnavailable(
        f"the inputs, float64 truths and baselines of the {len(distinct)} cases one probe "
        f"runs ({'; '.join(case.describe() for case in distinct)}){what} would take "
        f"{needed / 2**30:.1f} GiB of host memory together, more than the "
        f"{room / 2**30:.1f} GiB the auditor takes for them (half of this machine's)",
        "the probe's cases do not fit in host memory twice, the auditor's and the worker's"
        if crossing
        else "the float64 truths of the probe's cases do not fit in host memory together",
    )


def nudged_within(prepared: Prepared) -> Prepared:
    """`prepared`, without its nudged case (`Expected.nudge`) where that case's truth and
    baseline, which come to the host beside the case's own, would take it past a quarter of
    the machine's memory (half of `host_room`, so that a probe's other case fits beside
    both): a float64 truth of tens of GB made twice had the auditor killed for memory, with no
    report. Such a case is judged as one the reference cannot nudge is, and says why."""
    inputs, expect = prepared
    room = host_room() // 2
    if expect.nudge is None:
        return prepared
    if case_bytes(prepared) + host_bytes([*expect.truth, *expect.baseline]) <= room:
        return prepared
    why = (
        "its float64 truth and baseline would not fit in host memory beside the case's own "
        f"(a quarter of this machine's, {room / 2**30:.1f} GiB)"
    )
    return inputs, replace(expect, nudge=None, not_nudged=why)


def case_bytes(prepared: Prepared) -> int:
    """Host memory a prepared case holds: its inputs and `trusted_tensors`."""
    inputs, expect = prepared
    return host_bytes([*inputs.values(), *trusted_tensors(expect)])


def held_bytes(observation: Observation) -> int:
    """Host memory an observation keeps alive while it is held for later probes: its result's
    tensors, and its cases' inputs and `trusted_tensors`, which the executor may have let go
    meanwhile (a held run once kept a float64 truth of tens of GB the executor had dropped,
    and the auditor was killed for memory)."""
    tensors: list[object] = []
    for outcome in observation.result.calls:
        tensors += [*outcome.outputs, *outcome.inputs_after, *outcome.timed_outputs]
        tensors += [t for outputs in outcome.thread_outputs for t in outputs]
    for inputs in (observation.inputs, *observation.step_inputs):
        tensors += list(inputs.values())
    for expect in (observation.expected, *observation.step_expected):
        tensors += trusted_tensors(expect)
    return host_bytes(tensors)


def trusted_tensors(expect: Expected) -> list[torch.Tensor]:
    """The tensors a case's trusted side holds: its truth and baseline, and its nudged case's
    once made."""
    nudged = [t for pair in expect.nudged_made() for t in (pair.truth, pair.baseline)]
    return [*expect.truth, *expect.baseline, *nudged]


def host_bytes(values: Iterable[object]) -> int:
    """Host memory the tensors among `values` hold, each storage counted once."""
    storages = {}
    for value in values:
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            storage = value.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())
