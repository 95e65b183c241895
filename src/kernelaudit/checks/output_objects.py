"""Output objects: what a candidate returns must be a plain `torch.Tensor` with its elements in
real memory on the audited device, with the declared dtype and shape, no two elements sharing
memory, and no instance attributes. A lazy tensor subclass computes its values only when the
harness looks at them (after the timer stopped); an attribute override changes what the
harness reads; an expanded view passes for a full result while holding one row."""

from __future__ import annotations

from typing import ClassVar

import torch

from kernelaudit.checks.base import Failure, Observation, PlanContext, Probe
from kernelaudit.checks.labels import output_name
from kernelaudit.inputs.case import dtype_name
from kernelaudit.runner.boundary.messages import OutputObject


class OutputObjects:
    name: ClassVar[str] = "output-objects"
    summary: ClassVar[str] = (
        "outputs are plain tensors in real memory on the audited device, with the declared "
        "dtype, shape and non-overlapping strides, and no instance attributes"
    )

    def plan(self, ctx: PlanContext) -> list[Probe]:
        return []  # every run's outputs are looked at

    def judge(self, observation: Observation) -> list[Failure]:
        failures: list[Failure] = []
        seen: set[str] = set()
        for call, outcome in enumerate(observation.result.calls):
            expected = observation.expected_at(call)
            for k, found in enumerate(outcome.objects):
                name = output_name(observation.problem, k)
                want_dtype = expected.dtypes[k] if k < len(expected.dtypes) else None
                want_shape = tuple(expected.truth[k].shape) if k < len(expected.truth) else None
                for key, title in problems(found, observation.device, want_dtype, want_shape):
                    if f"{key}:{name}" in seen:
                        continue
                    seen.add(f"{key}:{name}")
                    failures.append(
                        Failure(
                            key=f"{key}:{name}",
                            title=f"output {name!r} {title}",
                            evidence=(
                                ("output", name),
                                ("call", call),
                                ("object", _shown(found)),
                            ),
                        )
                    )
        return failures

    def followups(self, observation: Observation, failures: list[Failure]) -> list[Probe]:
        return []


def problems(
    found: OutputObject,
    device: str,
    dtype: torch.dtype | None,
    shape: tuple[int, ...] | None,
) -> list[tuple[str, str]]:
    """(key, what is wrong) for each way the object is not a plain, real, dense result."""
    wrong: list[tuple[str, str]] = []
    if found.type_name != "torch.Tensor":
        what = "a tensor subclass" if found.device else "not a tensor at all"
        wrong.append(
            (
                "type",
                f"is a {found.type_name}, {what}: its values may be computed, or changed, "
                "when they are read instead of by the call",
            )
        )
    if not found.device:
        return wrong
    if found.layout != "strided":
        wrong.append(("storage", f"has no ordinary memory behind it (layout {found.layout})"))
    if torch.device(found.device).type != torch.device(device).type:
        wrong.append(("device", f"is on {found.device}, not on the audited device {device}"))
    if dtype is not None and found.dtype != dtype_name(dtype):
        wrong.append(("dtype", f"is {found.dtype}, but the problem declares {dtype_name(dtype)}"))
    if shape is not None and found.shape != shape:
        wrong.append(("shape", f"has shape {list(found.shape)}, expected {list(shape)}"))
    if found.overlapping:
        wrong.append(
            (
                "overlapping",
                f"has strides {list(found.stride)} under which several elements share memory "
                "(an expanded view, not a computed result)",
            )
        )
    if found.attributes:
        wrong.append(
            (
                "attributes",
                f"carries instance attributes {list(found.attributes)} that override what a "
                "plain tensor would report",
            )
        )
    return wrong


def _shown(found: OutputObject) -> dict[str, object]:
    return {
        "type": found.type_name,
        "device": found.device,
        "dtype": found.dtype,
        "shape": list(found.shape),
        "stride": list(found.stride),
        "layout": found.layout,
        "instance attributes": list(found.attributes),
    }
