"""What crosses the process boundary between the trusted auditor and the candidate's worker.

The worker receives only input values and how to lay them out; it never sees the reference,
expected outputs or tolerances. It sends back what the candidate produced and what the harness
observed around the call.
"""

from __future__ import annotations

from dataclasses import dataclass

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
class CallOutcome:
    """What one call produced."""

    outputs: tuple[torch.Tensor, ...]
    """The outputs as returned (or the filled slots), copied to the CPU right after the call."""
    inputs_after: tuple[torch.Tensor, ...] = ()
    """Values after the call of the arguments named by `Invocation.return_inputs`, in order."""
    aliases: tuple[str, ...] = ()
    """Outputs that share storage with an input or with another output ("output 0 ~ input 2")."""
    seconds: float = 0.0


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
    """"" | "exception" | "crash" | "timeout" | "cuda" | "contract" (wrong count/shape/dtype)."""
