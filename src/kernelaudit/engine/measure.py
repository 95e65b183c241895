"""The trusted side's measurements for timed, profiled and memory probes: the reference's time,
kernels and peak device memory at the case's own dtypes, the device's roofline, and the case's
FLOPs and bytes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from kernelaudit.inputs.case import Case, dtype_name
from kernelaudit.oracle.truth import native_copy
from kernelaudit.problem.spec import Problem
from kernelaudit.runner.boundary.memory import peak_since, read_memory, start_peak
from kernelaudit.timing.kernels import KernelProfile, profile_kernels
from kernelaudit.timing.measure import time_calls
from kernelaudit.timing.peaks import measure_roofline
from kernelaudit.timing.roofline import derived_bytes, derived_flops


def native_arguments(
    problem: Problem, case: Case, inputs: Mapping[str, object], device: str
) -> list[object]:
    """The reference's arguments on the device, at the case's dtypes."""
    config = problem.dtype_configs()[case.dtype_config]
    return [
        native_copy(inputs[spec.name], config.get(spec.name), device) for spec in problem.inputs
    ]


def compute_dtype(problem: Problem, case: Case) -> torch.dtype:
    """The dtype the roofline is read at: the first floating input's."""
    config = problem.dtype_configs()[case.dtype_config]
    for spec in problem.tensor_inputs:
        dtype = config.get(spec.name)
        if dtype is not None and dtype.is_floating_point:
            return dtype
    return torch.float32


def load_measuring() -> None:
    """Import what the trusted measurements load on first use: torch's FLOP counter brings in
    torch's compiler stack, over a second of imports. Called while the candidate's worker is
    still starting, so no measurement waits for it."""
    import torch._dynamo
    import torch.utils.flop_counter  # noqa: F401


UNCOUNTED = -1
"""What `count_flops` gives when the reference cannot run on shapes alone: count on the device."""


def count_flops(problem: Problem, case: Case, inputs: Mapping[str, object]) -> int | None:
    """The case's FLOPs as torch's FLOP counter sees them, counted on the meta device (shapes
    alone: no device time, so it can run beside anything); UNCOUNTED where the reference needs
    real values (data-dependent shapes, `.item()`)."""
    try:
        return derived_flops(problem.reference, native_arguments(problem, case, inputs, "meta"))
    except Exception:
        return UNCOUNTED


def reference_timing(
    problem: Problem,
    case: Case,
    inputs: Mapping[str, object],
    device: str,
    flops: int | None = UNCOUNTED,
) -> dict[str, Any]:
    """Time the reference the way the candidate is timed, and everything the roofline needs
    (`flops`, when `count_flops` counted them already)."""
    args = native_arguments(problem, case, inputs, device)
    with torch.no_grad():
        returned = problem.reference(*args)
        timing = time_calls(lambda: problem.reference(*args), device)
        if flops == UNCOUNTED:
            flops = derived_flops(problem.reference, args)
    outputs = returned if isinstance(returned, (tuple, list)) else (returned,)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    tensors += [o for o in outputs if isinstance(o, torch.Tensor)]
    return {
        "reference timing": timing,
        # kept on disk under the auditor's seal: no candidate can write one that is read
        "roofline": measure_roofline(device),
        "flops": flops,
        "bytes": derived_bytes(tensors),
        "dtype": dtype_name(compute_dtype(problem, case)),
    }


def reference_kernels(
    problem: Problem, case: Case, inputs: Mapping[str, object], device: str
) -> KernelProfile:
    args = native_arguments(problem, case, inputs, device)
    with torch.no_grad():
        return profile_kernels(lambda: problem.reference(*args), device)


def reference_memory(
    problem: Problem, case: Case, inputs: Mapping[str, object], device: str
) -> dict[str, Any]:
    """The reference's peak device memory during one call at the case's dtypes, above what
    was allocated when the call began (its inputs), measured as the worker measures the
    candidate's (`kernelaudit.runner.boundary.memory`): after a first call that warms it up, with
    the library workspaces torch keeps released. Nothing on a CPU."""
    where = torch.device(device)
    if where.type != "cuda":
        return {}
    args = native_arguments(problem, case, inputs, device)
    with torch.no_grad():
        problem.reference(*args)
        read_memory(where)  # waits for the first call and releases the workspaces
        allocated = start_peak(where)
        returned = problem.reference(*args)
        peak = peak_since(where, allocated)
    del returned
    return {"reference peak bytes": peak}
