"""What crosses the process boundary between the trusted auditor and the candidate's worker.

The worker receives only input values and how to lay them out; it never sees the reference,
expected outputs or tolerances. It sends back what the candidate produced and what the harness
observed around the call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

AUDITOR_PID = "KERNELAUDIT_AUDITOR_PID"
"""Set in every worker's environment: the auditor's pid. Its presence also tells an audit that
it was started from inside a worker."""


@dataclass(frozen=True)
class TensorArg:
    """A tensor input: its logical values (dense, on the CPU) and the layout to present it in."""

    values: torch.Tensor
    layout: str = "contiguous"


@dataclass(frozen=True)
class OutputSlot:
    """A preallocated output for destination-passing candidates."""

    shape: tuple[int, ...]
    dtype: torch.dtype


Arg = TensorArg | int | float | bool


@dataclass(frozen=True)
class Call:
    """One call of the candidate. Every call gets fresh device copies of its arguments.

    poison: what fills the preallocated slots and every `torch.empty*` allocation made during
        the call: "nan" (NaN for floats, the dtype's minimum for integers, True for bools) or
        "sentinel" (a finite value no computation is likely to produce).
    """

    args: tuple[Arg, ...]
    slots: tuple[OutputSlot, ...] = ()
    poison: str = "nan"
    reuse: int | None = None
    """Write the values into the input and output buffers of this earlier call (the same
    tensor objects, version counters untouched) instead of fresh ones."""
    keep: bool = True
    """Send the outputs back; without, only their fingerprints come back."""
    scrub: bool = False
    """Fill the device memory the allocator holds free with poison before the call."""
    settle_s: float = 0.0
    """Wait this long after the call (and the device synchronise) before the outputs are
    fingerprinted again and copied."""
    timed: bool = False
    """After the call, time repeated calls on the same inputs."""
    profiled: bool = False
    """List the device kernels one more call on the same inputs launches."""


@dataclass(frozen=True)
class Invocation:
    """A sequence of calls run back to back in one worker.

    return_inputs: indices of arguments whose values after each call are sent back.
    """

    calls: tuple[Call, ...]
    return_inputs: tuple[int, ...] = ()


@dataclass(frozen=True)
class GuardBreach:
    """Bytes outside a tensor's elements that the call changed."""

    tensor: str
    """"input 0", "output 1", "scratch 2" (an allocation made by the candidate), ..."""
    call: int
    bytes_changed: int
    first_offset: int
    """Byte offset of the first changed byte relative to the tensor's first element."""
    last_offset: int


@dataclass(frozen=True)
class OutputObject:
    """What a returned output is, as an object: checked before its values are trusted."""

    type_name: str
    """The qualified name of its type ("torch.Tensor" for a plain tensor)."""
    device: str
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    layout: str
    """"strided" for ordinary memory; "meta", "sparse", ... otherwise."""
    overlapping: bool
    """Whether two elements share memory (a stride-0 or expanded view)."""
    attributes: tuple[str, ...]
    """Names in the object's instance `__dict__`: overrides a plain tensor never has."""


@dataclass(frozen=True)
class StateChange:
    """A piece of process-wide state that differs from what it was."""

    name: str
    before: str
    after: str


@dataclass(frozen=True)
class CallOutcome:
    """What one call produced."""

    outputs: tuple[torch.Tensor, ...]
    """The outputs as returned (or the filled slots), copied to the CPU right after the call."""
    inputs_after: tuple[torch.Tensor, ...] = ()
    """Values after the call of the arguments named by `Invocation.return_inputs`, in order."""
    aliases: tuple[str, ...] = ()
    """Outputs that share storage with an input or with another output ("output 0 ~ input 2")."""
    seconds: float = 0.0
    objects: tuple[OutputObject, ...] = ()
    fingerprints: tuple[str, ...] = ()
    """One per output, of its bits after the device synchronise (and the settle time)."""
    deferred: tuple[int, ...] = ()
    """Outputs whose bits changed between the call's return and the device synchronise."""
    threads: tuple[str, ...] = ()
    """Threads started during the call and still alive after it (and the settle time)."""
    streams: int = 0
    """Device streams created during the call."""
    state_changes: tuple[StateChange, ...] = ()
    """Process-wide state the call changed."""
    timing: Any = None
    """A `kernelaudit.timing.measure.Timing` of repeated calls, for a timed call."""
    timed_fingerprints: tuple[tuple[str, ...], ...] = ()
    """The fingerprints of every timed repetition's outputs."""
    timed_outputs: tuple[torch.Tensor, ...] = ()
    """The outputs of the last timed repetition."""
    kernels: Any = None
    """A `kernelaudit.timing.kernels.KernelProfile`, for a profiled call."""
    device_bytes_held: int = -1
    """Device memory allocated through torch and still held after the call, in bytes."""


@dataclass(frozen=True)
class InvocationResult:
    """The whole sequence's result. `error` set means the candidate failed to run: the calls
    that finished before it are still in `calls`."""

    calls: tuple[CallOutcome, ...]
    changed_later: tuple[tuple[int, int], ...] = ()
    """(call, output) pairs whose device values changed after a later call returned."""
    breaches: tuple[GuardBreach, ...] = ()
    error: str = ""
    error_kind: str = ""
    """"" | "exception" | "crash" | "timeout" | "cuda" | "memory" | "contract"."""
    import_changes: tuple[StateChange, ...] = ()
    """Process-wide state that importing the candidate changed (the same on every result)."""
