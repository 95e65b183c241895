"""Whether a problem can run on the device a slot audits on, asked before its audit starts: a
problem that cannot is stored as such once, rather than crashing its slot or running it out of
memory again on every run."""

from __future__ import annotations

import math

import torch

from kernelaudit.formats import unrunnable
from kernelaudit.problem.dims import resolve_shape
from kernelaudit.problem.spec import Problem, ScalarInput
from kernelaudit.runner.auditor.limits import machine_memory

_TRUTH_BYTES = torch.finfo(torch.float64).bits // 8


def why_unrunnable(problem: Problem, device: str) -> str | None:
    """Why `problem` cannot be audited on `device` here (hardware it needs, data files that are
    absent, more memory than the device has), or None."""
    reason = unrunnable(problem)
    if reason is not None:
        return reason
    needed = least_bytes(problem)
    capacity, what = device_memory(device)
    if needed > capacity:
        return (
            f"its smallest workload needs at least {_gib(needed)} (its inputs and outputs, and "
            f"their float64 truth), more than the {_gib(capacity)} of {what}"
        )
    return None


def least_bytes(problem: Problem) -> int:
    """A lower bound on the memory an audit of `problem` holds at once: every tensor input and
    output of its smallest workload at its own dtype, plus the float64 copy the truth is
    computed on (under the dtype configuration that needs least)."""
    tensors = [i for i in problem.inputs if not isinstance(i, ScalarInput)]
    least: int | None = None
    for workload in problem.workloads:
        sizes = workload.as_dict()
        for config in problem.dtype_configs():
            total = 0
            for tensor in tensors:
                elements = math.prod(resolve_shape(tensor.shape, sizes))
                total += elements * (config[tensor.name].itemsize + _TRUTH_BYTES)
            for output in problem.outputs:
                elements = math.prod(resolve_shape(output.shape, sizes))
                itemsize = problem.output_dtype(output, config).itemsize
                total += elements * (itemsize + _TRUTH_BYTES)
            least = total if least is None else min(least, total)
    return least or 0


def device_memory(device: str) -> tuple[int, str]:
    """The memory an audit on `device` can use at most, and what it is, in words."""
    if torch.device(device).type == "cuda":
        properties = torch.cuda.get_device_properties(torch.device(device))
        return properties.total_memory, f"the GPU ({properties.name})"
    return machine_memory(), "this host's memory"


def _gib(count: int) -> str:
    return f"{count / 2**30:.1f} GiB"
