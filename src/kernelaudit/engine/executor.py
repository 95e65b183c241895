"""Turn a probe into an observation: build its inputs, compute what the trusted side expects,
run the candidate in its worker, and pair the two up."""

from __future__ import annotations

import time
from collections import OrderedDict

import torch

from kernelaudit.checks.base import Expected, Observation, Probe
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import materialize
from kernelaudit.oracle.truth import expected
from kernelaudit.problem.spec import Problem, ScalarInput, resolve_shape
from kernelaudit.runner.messages import Call, Invocation, OutputSlot, TensorArg
from kernelaudit.runner.process import Worker

_CACHE_SIZE = 16


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

    def prepare(self, case: Case) -> tuple[dict[str, object], Expected]:
        """The logical inputs of a case and the trusted results for them (memoised: checks
        often run the same case several ways)."""
        if case in self._expected:
            self._expected.move_to_end(case)
            return self._expected[case]
        began = time.perf_counter()
        inputs = materialize(self.problem, case)
        config = self.problem.dtype_configs()[case.dtype_config]
        prepared = (inputs, expected(self.problem, inputs, config, self.device))
        self.seconds["truth and baseline"] += time.perf_counter() - began
        self._expected[case] = prepared
        if len(self._expected) > _CACHE_SIZE:
            self._expected.popitem(last=False)
        return prepared

    def observe(self, probe: Probe) -> Observation:
        inputs, expect = self.prepare(probe.case)
        calls = [self._call(probe.case, inputs, poison) for poison in probe.plan.poisons]
        followup_expected = None
        if probe.plan.followup is not None:
            followup_inputs, followup_expected = self.prepare(probe.plan.followup)
            calls.append(self._call(probe.plan.followup, followup_inputs, "nan"))
        tensor_positions = tuple(
            i for i, inp in enumerate(self.problem.inputs) if not isinstance(inp, ScalarInput)
        )
        began = time.perf_counter()
        self.worker.start()  # waits for a worker launched earlier, or restarts a crashed one
        started = time.perf_counter()
        result = self.worker.run(Invocation(calls=tuple(calls), return_inputs=tensor_positions))
        self.seconds["worker start"] += started - began
        self.seconds["candidate runs"] += time.perf_counter() - started
        return Observation(self.problem, probe, result, inputs, expect, followup_expected)

    def _call(self, case: Case, inputs: dict[str, object], poison: str) -> Call:
        args = []
        for inp in self.problem.inputs:
            value = inputs[inp.name]
            if isinstance(value, torch.Tensor):
                args.append(TensorArg(value, case.layout_of(inp.name)))
            else:
                args.append(value)
        slots: tuple[OutputSlot, ...] = ()
        if self.problem.contract.style == "destination":
            config = self.problem.dtype_configs()[case.dtype_config]
            sizes = case.size_map()
            slots = tuple(
                OutputSlot(resolve_shape(out.shape, sizes), self.problem.output_dtype(out, config))
                for out in self.problem.outputs
            )
        return Call(args=tuple(args), slots=slots, poison=poison)
