"""Turn a probe into an observation: build its inputs, compute what the trusted side expects,
run the candidate in its worker, and pair the two up."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import torch

from kernelaudit.checks.base import Expected, Observation, Probe, Step
from kernelaudit.engine import beside
from kernelaudit.engine.calls import call_for, declared_outputs, reply_limit
from kernelaudit.engine.clocked import (
    Clocked,
    beats_floor,
    clock,
    copy_seconds,
    disagrees,
    repeats_for,
)
from kernelaudit.engine.host_memory import (
    cache_bytes,
    case_bytes,
    estimated_bytes,
    nudged_within,
    refuse_unfitting,
    result_copies,
)
from kernelaudit.engine.measure import (
    UNCOUNTED,
    count_flops,
    load_measuring,
    reference_kernels,
    reference_memory,
    reference_timing,
)
from kernelaudit.errors import CaseUnavailable, ProblemError
from kernelaudit.inputs.ahead import DrawsAhead
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.distributions import UNDEFINED_WHERE_NAN
from kernelaudit.inputs.materialize import materialize, shapes_only
from kernelaudit.oracle.compare import judging_device
from kernelaudit.oracle.resident import RESIDENT
from kernelaudit.oracle.truth import expected
from kernelaudit.oracle.warm import judged_dtypes, warm_beside
from kernelaudit.problem.spec import Problem, ScalarInput
from kernelaudit.runner.auditor.process import Worker
from kernelaudit.runner.boundary.messages import Call, CallOutcome, Invocation, InvocationResult
from kernelaudit.timing.peaks import measure_roofline

_CACHE_SIZE = 16
"""Cases whose inputs and trusted results are kept for the checks that run them again."""


_CACHED_BYTES_KEPT = 256 << 20
"""Device memory the auditor's allocator may keep cached, unused, while the candidate runs."""


class Executor:
    """Runs probes of one problem against one candidate's worker."""

    def __init__(self, problem: Problem, worker: Worker, device: str):
        self.problem = problem
        self.worker = worker
        self.device = device
        self._expected: OrderedDict[Case, tuple[dict[str, object], Expected]] = OrderedDict()
        self.seconds: dict[str, float] = {
            "worker start": 0.0,
            "truth and baseline": 0.0,
            "candidate runs": 0.0,
        }
        self._counted: dict[Case, int | None] = {}
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="measure")
        self._ahead: Future[None] | None = None
        self._drawn_ahead = DrawsAhead() if draws_ahead_on(device) else None
        """The next probe's large draws, made while the worker runs (`inputs.ahead`)."""
        self._warmed = False
        """Whether the judging's kernels were loaded beside a run (`oracle.warm`)."""

    def measure_ahead(self, probes: Sequence[Probe]) -> None:
        """Start making what the timed probes need, beside the probes that come first: torch's
        FLOP counter loaded (it imports torch's compiler stack, seconds on a small machine),
        the FLOPs of every timed case counted on shapes alone, the device's roofline (on a
        GPU measured before the audit began, on a quiet device, or read from its sealed
        cache; on a CPU measured here). The timed probes run last and wait for it
        (`_wait_ahead`).

        It runs in a thread of its own and touches nothing the probes share: the case's
        inputs as meta tensors (no values drawn, no code of the problem's run but the
        reference on shapes), the roofline's own buffers. Nothing here switches torch's
        process-wide settings; a float64 truth running meanwhile (which switches the default
        dtype) can change only the dtype of a meta tensor counted, never a count. A case whose
        shapes need values (the problem's own input generator) is counted on the device
        when it is timed."""
        timed = [
            step.case or probe.case
            for probe in probes
            for step in probe.plan.sequence()
            if step.timed
        ]
        if timed:
            self._ahead = self._pool.submit(self._measure_ahead, list(dict.fromkeys(timed)))

    def _measure_ahead(self, timed: list[Case]) -> None:
        load_measuring()
        for case in timed:
            # shapes alone: `materialize` may run the problem's forward in float64, which
            # switches torch's default dtype for the whole process
            inputs = shapes_only(self.problem, case)
            if inputs is not None:
                self._counted[case] = count_flops(self.problem, case, inputs)
        beside.settle()  # the auditor's own work beside the audit is over before it measures
        measure_roofline(self.device)

    def _wait_ahead(self) -> None:
        """Wait for what `measure_ahead` started; its error, if any, is this probe's."""
        if self._ahead is not None:
            ahead, self._ahead = self._ahead, None
            ahead.result()

    def close(self) -> None:
        """Wait for anything still running beside the probes (an audit that ended early)."""
        self._pool.shutdown(wait=True)
        if self._drawn_ahead is not None:
            self._drawn_ahead.close()

    def prepare(self, case: Case) -> tuple[dict[str, object], Expected]:
        """The logical inputs of a case and the trusted results for them (memoised: checks
        often run the same case several ways)."""
        if case in self._expected:
            self._expected.move_to_end(case)
            return self._expected[case]
        refuse_unfitting(self.problem, [case])
        most = cache_bytes()
        # room made before the truth is computed, not after: a large case's truth and
        # baseline would otherwise come to the host beside every case kept
        self._drop_oldest(most - estimated_bytes(self.problem, case), keep=0)
        began = time.perf_counter()
        prepared = nudged_within(self._truth(case))
        self.seconds["truth and baseline"] += time.perf_counter() - began
        self._expected[case] = prepared
        self._drop_oldest(most, keep=1)
        return prepared

    def _drop_oldest(self, most_bytes: int, keep: int) -> None:
        """Drop the least recently used kept cases until they hold at most `most_bytes` and
        `_CACHE_SIZE` of them are left, keeping the `keep` most recent whatever their size
        (each sized as it is now: its nudged case may have come since it was kept)."""
        held = sum(case_bytes(prepared) for prepared in self._expected.values())
        while len(self._expected) > keep and (
            len(self._expected) > _CACHE_SIZE or held > most_bytes
        ):
            _, oldest = self._expected.popitem(last=False)
            held -= case_bytes(oldest)

    def _truth(self, case: Case) -> tuple[dict[str, object], Expected]:
        inputs = materialize(self.problem, case)
        config = self.problem.dtype_configs()[case.dtype_config]
        try:
            # made again without the device copies of kept draws where the device runs out of
            # memory while they are held (`oracle.resident`)
            expect = RESIDENT.retried_without(
                lambda: expected(self.problem, inputs, config, self.device)
            )
        except ProblemError as error:
            if at_a_workload(self.problem, case) or device_fault(error):
                raise
            # sizes no workload has, which the reference cannot handle (channels fewer than
            # its groups, say): a constraint the declaration does not state, not the problem's
            # fault, and no case to judge a candidate on
            raise CaseUnavailable(
                f"the reference cannot run at {case.describe()}: {error.message}",
                "the reference cannot run at these sizes",
            ) from error
        except torch.cuda.OutOfMemoryError as error:
            # even with nothing kept, the reference's runs at this case need more device memory
            # than is free (an attention's float64 intermediates grow with the square of the
            # sequence): no case to judge on this device, and no fault of the candidate's
            torch.cuda.empty_cache()
            first = str(error).split(". ", 2)[:2]
            raise CaseUnavailable(
                f"the reference's float64 run at {case.describe()} does not fit in this "
                f"device's free memory ({'. '.join(first)})",
                "the float64 truth does not fit in device memory",
            ) from None
        if any(drawn in UNDEFINED_WHERE_NAN for _, drawn in case.values):
            expect = replace(expect, undefined_where_nan=True)
        return inputs, expect

    def observe(self, probe: Probe, upcoming: Probe | None = None) -> Observation:
        """Run `probe`; `upcoming`, the probe that runs next, has its large draws made while
        the worker runs this one (on a GPU, and never beside a call that is timed, profiled
        or measured for memory)."""
        steps = probe.plan.sequence()
        cases = [step.case or probe.case for step in steps]
        results = [(case, result_copies(step)) for step, case in zip(steps, cases, strict=True)]
        refuse_unfitting(self.problem, [*cases, probe.case], calls=results)
        prepared = [self.prepare(case) for case in cases]
        calls = [
            replace(self._call(case, inputs, step.poison), **step.call_options())
            for step, case, (inputs, _) in zip(steps, cases, prepared, strict=True)
        ]
        inputs, expect = self.prepare(probe.case)
        measurements = self._measure(probe, steps, cases)
        tensor_positions = tuple(
            i for i, inp in enumerate(self.problem.inputs) if not isinstance(inp, ScalarInput)
        )
        writable = set(self.problem.contract.mutates)
        judged = tuple(i for i in tensor_positions if self.problem.inputs[i].name in writable)
        began = time.perf_counter()
        release_cached(self.device)
        self.worker.start()  # waits for a worker launched earlier, or restarts a crashed one
        started = time.perf_counter()
        fallback = self.worker.limits.host_memory_bytes or (1 << 40)
        limit = reply_limit(self.problem, cases, fallback)
        invocation = Invocation(
            calls=tuple(calls), return_inputs=tensor_positions, always_return=judged
        )
        self._draw_ahead(steps, upcoming)
        warming = self._warm_beside(steps)
        try:
            result = self.worker.run(invocation, limit)
        finally:
            wall = time.perf_counter() - started
            if warming is not None:
                warming.join()
            drawing = self._settle_ahead()
        timed = [i for i, step in enumerate(steps) if step.timed]
        if timed and not result.error and len(result.calls) > timed[0]:
            i = timed[0]
            measurements["auditor clock"] = self._clocked(
                replace(invocation, calls=(calls[i],)),
                cases[i],
                result.calls[i],
                wall,
                limit,
                measurements,
            )
        self.seconds["worker start"] += started - began
        self.seconds["candidate runs"] += time.perf_counter() - started - drawing
        return Observation(
            self.problem,
            probe,
            result,
            inputs,
            expect,
            step_inputs=tuple(i for i, _ in prepared),
            step_expected=tuple(e for _, e in prepared),
            measurements=measurements,
            device=self.device,
        )

    def _draw_ahead(self, steps: tuple[Step, ...], upcoming: Probe | None) -> None:
        if self._drawn_ahead is None or upcoming is None:
            return
        if any(step.measures_the_device for step in steps):
            return  # the host's cores stay the candidate's while it is measured
        cases = [step.case or upcoming.case for step in upcoming.plan.sequence()]
        fresh = [case for case in (*cases, upcoming.case) if case not in self._expected]
        self._drawn_ahead.start(self.problem, fresh)

    def _warm_beside(self, steps: tuple[Step, ...]) -> threading.Thread | None:
        """At the first run that measures nothing on the device, the judging's kernels loaded
        in a thread of their own while the worker runs (`oracle.warm`); joined when it ends."""
        if self._warmed or any(step.measures_the_device for step in steps):
            return None
        self._warmed = True
        return warm_beside(judging_device(self.device), judged_dtypes(self.problem))

    def _settle_ahead(self) -> float:
        """Wait for the draws made ahead; the seconds waited count as making cases."""
        if self._drawn_ahead is None:
            return 0.0
        began = time.perf_counter()
        self._drawn_ahead.settle()
        waited = time.perf_counter() - began
        self.seconds["truth and baseline"] += waited
        return waited

    def _measure(self, probe: Probe, steps: tuple[Step, ...], cases: list[Case]) -> dict[str, Any]:
        """What the trusted side measures for timed, profiled and memory steps: the reference's
        time, kernels and peak device memory on the same case, the device's roofline, the
        case's FLOPs and bytes."""
        found: dict[str, Any] = {}
        if not any(step.measures_the_device for step in steps):
            return found
        began = time.perf_counter()
        self._wait_ahead()
        beside.settle()
        inputs = [self._inputs(case) for case in cases]
        self._measure_reference(steps, cases, inputs, found)
        self.seconds["reference timing"] = (
            self.seconds.get("reference timing", 0.0) + time.perf_counter() - began
        )
        return found

    def _measure_reference(
        self,
        steps: tuple[Step, ...],
        cases: list[Case],
        inputs: list[dict[str, object]],
        found: dict[str, Any],
    ) -> None:
        for step, case, given in zip(steps, cases, inputs, strict=True):
            if step.timed and "reference timing" not in found:
                flops = self._counted.get(case, UNCOUNTED)
                found.update(reference_timing(self.problem, case, given, self.device, flops))
            if step.profiled and "reference kernels" not in found:
                found["reference kernels"] = reference_kernels(
                    self.problem, case, given, self.device
                )
            if step.memory and "reference peak bytes" not in found:
                found.update(reference_memory(self.problem, case, given, self.device))

    def _clocked(
        self,
        invocation: Invocation,
        case: Case,
        outcome: CallOutcome,
        wall_s: float,
        reply_bytes: int,
        found: dict[str, Any],
    ) -> Clocked | None:
        """The timed call measured on the auditor's own clock (`engine.clocked`); `found`:
        the probe's measurements (the roofline the calls back to back are held to)."""
        timing = outcome.timing
        if timing is None:
            return None
        call = invocation.calls[0]
        try:
            returned = () if call.slots else declared_outputs(self.problem, case)
        except (KeyError, ValueError):
            returned = ()  # an output whose shape the sizes do not fix: nothing to copy into
        upper = wall_s / max(1, timing.repetitions + timing.warmup + 1)
        repeats, why = repeats_for(timing.median_s, upper, call.slots or returned)
        if not repeats:
            return Clocked(0, error=why)
        plain = replace(
            call, timed=False, profiled=False, memory=False, keep=True, repeat_outputs=returned
        )

        def run(count: int) -> tuple[float, InvocationResult]:
            # the base lays out as many buffers as the repetitions fill: their cost cancels
            calls = (replace(plain, repeat=repeats, repeat_calls=count > 0),)
            result = self.worker.run(replace(invocation, calls=calls), reply_bytes)
            return self.worker.round_trip_s, result

        # the timed call made again, for a figure of the worker's next to a pair measured
        # again: a host busy since the timing probe slows both alike
        timed_again = replace(invocation, calls=(replace(call, profiled=False, memory=False),))
        return clock(
            run,
            repeats,
            timing.median_s,
            too_slow=lambda reported, figure: disagrees(reported, figure, self.device),
            too_fast=lambda most: beats_floor(found, most, self.device) is not None,
            copy_s=copy_seconds(returned, self.device),
            warm_up=torch.device(self.device).type == "cuda",
            retime=lambda: self.worker.run(timed_again, reply_bytes),
        )

    def _inputs(self, case: Case) -> dict[str, object]:
        return self.prepare(case)[0]

    def _call(self, case: Case, inputs: dict[str, object], poison: str) -> Call:
        return call_for(self.problem, case, inputs, poison)


def draws_ahead_on(device: str) -> bool:
    """Whether the next probe's draws are made while the worker runs: on a GPU, where the
    worker's calls leave the host's cores to the auditor; not on a CPU, where the candidate's
    calls run on them."""
    return torch.device(device).type == "cuda"


def release_cached(device: str) -> None:
    """Give back the device memory this process's allocator keeps cached but unused (the
    float64 truth of a large case leaves tens of GiB there), so the candidate's call, which
    runs next in another process, has the room its limit promises."""
    where = torch.device(device)
    if where.type != "cuda":
        return
    if torch.cuda.memory_reserved(where) - torch.cuda.memory_allocated(where) > _CACHED_BYTES_KEPT:
        torch.cuda.empty_cache()


def at_a_workload(problem: Problem, case: Case) -> bool:
    """Whether the case's sizes are those of one of the problem's declared workloads."""
    sizes = case.size_map()
    return any(workload.held_by(sizes) for workload in problem.workloads)


def device_fault(error: BaseException) -> bool:
    """Whether the reference's failure left the device unusable (a device-side assertion, an
    illegal access): then the audit cannot go on, whatever the case."""
    cause = error.__cause__ or error
    return type(cause).__name__ == "AcceleratorError" or "CUDA error" in str(cause)
