"""What crosses the process boundary between the trusted auditor and the candidate's worker.

The worker receives only input values and how to lay them out; it never sees the reference,
expected outputs or tolerances. It sends back what the candidate produced and what the harness
observed around the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

CANDIDATE_MAINS = (
    "kernelaudit.runner.worker.main",
    "kernelaudit.sanitizer.child",
    "kernelaudit.interpret.child",
    "kernelaudit.large.child",
    "kernelaudit.training.worker",
)
"""The programs that import and run a candidate: a process whose main module is one of them
is a candidate's, and must not start audits of its own."""


@dataclass(frozen=True)
class Load:
    """The worker's first message: where to run it and what to call in its file. It comes
    after the process has started, so the process can be started before the auditor knows
    these."""

    device: str
    gpu_memory_bytes: int
    """The cap on torch's allocator in the worker (0: none)."""
    function: str
    autograd: str
    """`CandidateRef.autograd_argument()`: how to differentiate the candidate ("-": not)."""
    canary: bytes = b""
    """The canary pattern the worker guards its buffers with (`runner.boundary.guard.use_canary`),
    drawn by the auditor so it can check the bands of the buffers in an arena itself; empty:
    the worker's own draw."""


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
        "sentinel" (a finite value no computation is likely to produce, drawn per audit).
    sentinel: the sentinel poison's value for this call (`poison.AUDIT_SENTINEL` of the
        auditor that made it); None: the running process's own.
    """

    args: tuple[Arg, ...]
    slots: tuple[OutputSlot, ...] = ()
    poison: str = "nan"
    sentinel: float | None = None
    reuse: int | None = None
    """Write the values into the input and output buffers of this earlier call (the same
    tensor objects, version counters untouched) instead of fresh ones."""
    updated: bool = False
    """With `reuse`: write them with an in-place copy on the tensors themselves, as an
    optimizer's step updates a weight, so their version counters move."""
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
    noise: bool = False
    """Keep every SM of the device busy with kernels on a side stream while the call runs (a
    burst launched right before it, lasting about as long as the invocation's first call), so
    its blocks are placed and timed differently. The outputs are compared bit for bit with
    those of the invocation's first call (`CallOutcome.mismatches`). Nothing on a CPU."""
    threads: int = 0
    """After the call, this many host threads call the candidate at once, each on its own
    device stream with its own copies of the inputs and outputs (identical values); every
    thread's outputs are compared bit for bit with those of the invocation's first call."""
    autotune: tuple[str, int] | None = None
    """(autotuner, configuration index): the named Triton autotuner runs only that one of its
    configurations during the call (see `InvocationResult.autotuners` for the names)."""
    memory: bool = False
    """Measure the device memory the call leaves allocated and the peak it reaches (CUDA)."""
    queued: bool = False
    """Call the candidate while unrelated work is still queued on the caller's stream: the
    inputs are overwritten with NaN (floats) or zeros and the device synchronised, then a
    burst of kernels and the copy of the inputs' true values are queued on the current stream,
    and the call is made at once. A candidate that honours the stream it is called on reads
    the true values; one that computes on a stream of its own without waiting for the
    caller's reads the overwritten ones. The outputs are compared bit for bit with those of
    the invocation's first call. Nothing on a CPU."""
    repeat: int = 0
    """After the call (and what is watched around it), call the candidate this many more
    times back to back on the same inputs, with nothing of the harness between them, and wait
    for the device once at the end. Each repetition's results go to buffers of its own in the
    arena: the slots it is given (destination style) or, for results it returns, copies made
    into `repeat_outputs`. The auditor times the invocation on its own clock and reads those
    buffers itself (`engine.clocked`)."""
    repeat_outputs: tuple[OutputSlot, ...] = ()
    """The declared outputs a repetition's returned results are copied into (return style;
    a destination-style call's repetitions fill copies of its `slots`)."""
    repeat_calls: bool = True
    """False: the repetitions' buffers are laid out as for `repeat`, and no call is made (the
    invocation the auditor's clock takes as its base pays for the same layout). The auditor's
    decision, never sent: every call leaves for the worker with True, and the worker asks for
    the decision once the call is made (`REPEAT_ASKED`), so a candidate that reads the
    worker's memory during its call cannot tell the clock's base from its repetitions and slow
    the base alone."""


REPEAT_ASKED = "repeat?"
"""The worker's question, after a call with `Call.repeat` is made: ("repeat?", call index).
The auditor answers (`REPEAT_TOLD`, `Call.repeat_calls`)."""
REPEAT_TOLD = "repeat"


@dataclass(frozen=True)
class Invocation:
    """A sequence of calls run back to back in one worker.

    return_inputs: indices of arguments whose values after each call are sent back: those in
        `always_return` (inputs the contract lets the candidate write, judged as outputs)
        whatever happened to them, the others only where the call changed a bit of them.
    """

    calls: tuple[Call, ...]
    return_inputs: tuple[int, ...] = ()
    always_return: tuple[int, ...] = ()
    arena: tuple[int, int] = (0, 0)
    """(offset, bytes) of the stretch of memory the calls' fresh guarded buffers are taken
    from (`runner.boundary.arena`): in the invocation's region on a CPU, in the device memory `lent`
    names on a GPU; (0, 0): none, each buffer is the worker's own memory."""
    lent: int = 0
    """The serial number of the block of device memory the auditor lent the worker for the
    arena (`runner.boundary.lent`), handed over before this invocation; 0: the arena, if any, is in
    the invocation's region."""


@dataclass(frozen=True)
class Placement:
    """Where the worker put a fresh guarded buffer in the arena (`runner.boundary.arena`): the
    auditor knows its size and layout from the call, and reads it there itself."""

    tensor: str
    """"input 0", "output 1": as in `GuardBreach`."""
    call: int
    offset: int
    """The buffer's first byte, from the region's start."""
    phase: int
    """Where in the canary pattern the buffer's first byte is."""


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
    inputs_after: tuple[torch.Tensor | None, ...] = ()
    """Values after the call of the arguments named by `Invocation.return_inputs`, in order;
    None for a tensor the call left bit for bit as it was given (never for one named by
    `Invocation.always_return`)."""
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
    interpreted_launches: int = -1
    """Triton kernel launches through Triton's interpreter during the call (a CPU worker);
    -1 where they are not counted (the candidate defines no Triton kernel, or a GPU)."""
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
    """Device memory allocated through torch and still held after the call, beyond the bytes
    of the outputs it returned (and the library workspaces torch keeps), in bytes; -1 when not
    measured (see `Call.memory`)."""
    device_bytes_unseen: int = 0
    """Change in the device memory in use that torch's allocator does not account for (raw
    driver allocations, other processes), in bytes, over the call."""
    device_peak_bytes: int = -1
    """Most device memory allocated through torch during the call, above what was allocated
    when it began (its inputs); -1 when not measured."""
    repeats_read: bool = False
    """Whether the auditor read the buffers of the call's repetitions (`Call.repeat`) in the
    arena. Set by the auditor alone (`runner.auditor.observed`), whatever the reply said."""
    repeats_unlike: tuple[int, ...] = ()
    """The repetitions whose buffers do not hold, bit for bit, the results the call sent back
    (read by the auditor, as `repeats_read`)."""
    mismatches: tuple[tuple[int, int, int, int, float], ...] = ()
    """For a call under noise or with threads: (runner, output, differing elements, flat index
    of the first one, largest absolute difference) for every output whose bits differ from the
    same output of the invocation's first call. Runner -1 is the call itself, k >= 0 its k-th
    concurrent thread."""
    thread_outputs: tuple[tuple[torch.Tensor, ...], ...] = ()
    """Each concurrent thread's outputs, copied to the CPU (for a kept call)."""
    thread_fingerprints: tuple[tuple[str, ...], ...] = ()
    """Each concurrent thread's output fingerprints."""
    thread_errors: tuple[str, ...] = ()
    """Each concurrent thread's failure ("" for a thread whose call returned)."""
    noise_kernels: int = 0
    """Kernels launched on the side stream to keep the device busy during the call."""
    forced_runs: int = 0
    """Launches of the forced autotuner configuration during the call (`Call.autotune`)."""


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
    """"" | "exception" | "crash" | "timeout" | "cuda" | "memory" | "contract" | "tampered"
    (the auditor could not check the reply's observations, `runner.auditor.observed`)."""
    import_changes: tuple[StateChange, ...] = ()
    """Process-wide state that importing the candidate changed (the same on every result)."""
    autotuners: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Every Triton autotuner reachable from the candidate ("kernels.py::_matmul"), with each
    of its configurations described ("BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3")."""
    not_run: str = ""
    """Why a forced autotuner configuration could not run on this input here (pruned by the
    autotuner for it, or beyond what this device can compile): the calls stop there, and it
    is no failure of the candidate."""
    placements: tuple[Placement, ...] = ()
    """Where each fresh input and output buffer went in the invocation's arena."""


def withheld(invocation: Invocation) -> tuple[Invocation, dict[int, bool]]:
    """The invocation as the worker is told it, every call's `repeat_calls` left at True,
    and the decisions withheld, by call index, for the worker's `REPEAT_ASKED` questions."""
    answers = {i: call.repeat_calls for i, call in enumerate(invocation.calls) if call.repeat}
    if all(answers.values()):
        return invocation, answers
    calls = tuple(replace(call, repeat_calls=True) for call in invocation.calls)
    return replace(invocation, calls=calls), answers


def changed(early: Sequence[str], late: Sequence[str]) -> tuple[int, ...]:
    """The outputs whose fingerprints differ between two looks at the same call's results."""
    return tuple(i for i, (a, b) in enumerate(zip(early, late, strict=False)) if a != b)
