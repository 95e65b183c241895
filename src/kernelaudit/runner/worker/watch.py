"""What the worker watches around a call, besides the values: the output objects themselves,
fingerprints of their bits before and after the device settles, threads and streams the call
leaves behind, and the device memory the allocator holds free (poisoned before a call, so an
output that inherits it shows)."""

from __future__ import annotations

import inspect
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelaudit.runner.boundary.memory import DeviceMemory
from kernelaudit.runner.boundary.messages import CallOutcome, OutputObject, StateChange
from kernelaudit.runner.boundary.poison import SCRUB_BYTE
from kernelaudit.runner.worker.contention import Noise

_CHUNK = 1 << 24
"""Words hashed per step: bounds the scratch a fingerprint needs to 16 Mi int64s."""
_PRIME = 65521
_SMALL_REQUEST = 1 << 20
"""The largest request PyTorch's caching allocator serves from its pool of small blocks."""


def describe_output(output: object) -> OutputObject:
    """An output as an object: its exact type, where its elements live, and any instance
    attributes (a plain tensor has none)."""
    kind = type(output)
    type_name = f"{kind.__module__}.{kind.__qualname__}"
    if type_name == "torch._tensor.Tensor":
        type_name = "torch.Tensor"
    if not isinstance(output, torch.Tensor):
        return OutputObject(type_name, "", "", (), (), "", False, ())
    attributes = tuple(sorted(getattr(output, "__dict__", {}) or {}))
    layout = str(output.layout).removeprefix("torch.")
    if output.device.type == "meta":
        layout = "meta"
    strided = output.layout == torch.strided
    return OutputObject(
        type_name=type_name,
        device=str(output.device),
        dtype=str(output.dtype).removeprefix("torch."),
        shape=tuple(output.shape),
        stride=tuple(output.stride()) if strided else (),
        layout=layout,
        overlapping=strided and _overlapping(tuple(output.shape), tuple(output.stride())),
        attributes=attributes,
    )


def _overlapping(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Whether two distinct indices reach the same element: some dimension of size > 1 steps
    by less than the span of the dimensions nested inside it."""
    dims = sorted((abs(s), n) for n, s in zip(shape, stride, strict=True) if n > 1)
    reach = 1
    for step, size in dims:
        if step < reach:
            return True
        reach = step * (size - 1) + reach
    return False


def fingerprint(tensor: object) -> str:
    """A digest of a tensor's bits, computed where the tensor lives: two sums of its 32-bit
    words, one plain and one weighting the word at position i by i mod 65521 + 1, so a change
    of any element changes it. Both come from one pass that sums the words by their weight
    (a column of the words laid out 65521 to a row), in steps of at most `_CHUNK` words."""
    if type(tensor) is not torch.Tensor or tensor.layout != torch.strided:
        return "<not a plain tensor>"
    if tensor.device.type == "meta":
        return "<meta>"
    flat = tensor.detach().contiguous().reshape(-1)
    if flat.numel() == 0:
        return "<empty>"
    raw = flat.view(torch.uint8)
    words = raw.view(torch.int32) if raw.numel() % 4 == 0 else raw.to(torch.int32)
    count = words.numel()
    whole = count - count % _PRIME
    weights = torch.arange(1, min(count, _PRIME) + 1, device=words.device)
    tail = words[whole:].to(torch.int64)
    plain = tail.sum()
    weighted = (tail * weights[: tail.numel()]).sum()
    if whole:  # a tensor shorter than a row has only its tail
        rows = words[:whole].view(-1, _PRIME)
        columns = torch.zeros(_PRIME, dtype=torch.int64, device=words.device)
        for start in range(0, rows.shape[0], _CHUNK // _PRIME):
            columns += rows[start : start + _CHUNK // _PRIME].sum(0, dtype=torch.int64)
        plain += columns.sum()
        weighted += (columns * weights).sum()
    return f"{int(plain):x}:{int(weighted):x}"


class StreamCount:
    """Counts the `torch.cuda.Stream` objects created while it is installed."""

    def __init__(self) -> None:
        self.created = 0

    def install(self) -> None:
        stream = torch.cuda.Stream
        original = stream.__new__
        count = self

        def counting_new(cls: type, *args: Any, **kwargs: Any) -> Any:
            count.created += 1
            return original(cls, *args, **kwargs)

        stream.__new__ = counting_new  # type: ignore[method-assign]


class InterpretedLaunches:
    """Triton kernels run through Triton's interpreter (a CPU worker): how many the candidate
    can reach (named by its function or by the functions of its own it calls), and how many
    launches have been made since `install`. A Triton candidate whose call launches none of
    its kernels computes with something else (torch, the host); on a GPU the profiler says so,
    on a CPU this count does. -1: not counted (no Triton kernel within reach, or Triton
    compiles instead of interpreting)."""

    def __init__(self) -> None:
        self.defined = -1
        self.launched = 0

    def install(self, candidate: object) -> None:
        """Called once the candidate is imported: Triton is imported only if it was. Where
        the candidate's function reaches no kernel, the kernels its own module defines count:
        a file that writes a Triton kernel and computes with torch instead is the fallback
        the GPU's profiler reports."""
        module = sys.modules.get("triton.runtime.interpreter")
        if module is None or os.environ.get("TRITON_INTERPRET") != "1":
            return
        kind = module.InterpretedFunction
        reach = _kernels_within_reach(candidate, kind) or _kernels_of_module(candidate, kind)
        self.defined = len(reach) or -1
        if self.defined < 0:
            return
        original = kind.run
        count = self

        def counting_run(function: Any, *args: Any, **kwargs: Any) -> Any:
            if not kwargs.get("warmup"):
                count.launched += 1
            return original(function, *args, **kwargs)

        kind.run = counting_run


_LIBRARIES = ("torch", "triton", "numpy", "kernelaudit")
_REACH = 256
"""The most functions followed from a candidate when looking for its kernels."""


def _kernels_within_reach(candidate: object, kind: type) -> set[int]:
    """The ids of the `kind` objects (interpreted Triton kernels, possibly inside autotuners
    and heuristics) that `candidate` names, directly or through functions of its own (not a
    library's) that it names, in their code, nested code and closures."""
    found: set[int] = set()
    seen: set[int] = set()
    pending = [inspect.unwrap(candidate)] if callable(candidate) else []
    while pending and len(seen) < _REACH:
        function = pending.pop()
        if id(function) in seen or not inspect.isfunction(function):
            continue
        seen.add(id(function))
        names: set[str] = set()
        codes = [function.__code__]
        while codes:
            code = codes.pop()
            names.update(code.co_names)
            codes += [c for c in code.co_consts if inspect.iscode(c)]
        named = [function.__globals__.get(n) for n in names]
        named += [cell.cell_contents for cell in function.__closure__ or () if _filled(cell)]
        for thing in named:
            kernel = _kernel(thing, kind)
            if kernel is not None:
                found.add(id(kernel))
            if inspect.isfunction(thing) and not _in_library(thing.__module__ or ""):
                pending.append(thing)
    return found


def _kernels_of_module(candidate: object, kind: type) -> set[int]:
    """The ids of the `kind` objects the candidate's own module holds at its top level
    (defined there or imported into it); none for a module of a library."""
    name = getattr(inspect.unwrap(candidate), "__module__", None) if callable(candidate) else None
    module = sys.modules.get(name or "")
    if module is None or _in_library(module.__name__):
        return set()
    kernels = (_kernel(thing, kind) for thing in list(vars(module).values()))
    return {id(kernel) for kernel in kernels if kernel is not None}


def _kernel(thing: object, kind: type) -> object | None:
    """`thing` if it is a `kind` object, or the one it wraps (an autotuner around heuristics
    around the kernel), else None."""
    inner = thing
    for _ in range(4):
        if isinstance(inner, kind):
            return inner
        inner = getattr(inner, "fn", None)
    return None


def _in_library(module: str) -> bool:
    return module.split(".", 1)[0] in _LIBRARIES


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def threads_started(before: set[threading.Thread]) -> tuple[str, ...]:
    """Names of live threads that were not running before the call."""
    return tuple(t.name for t in threading.enumerate() if t not in before and t.is_alive())


def scrub_free_memory(device: torch.device) -> int:
    """Fill the blocks the caching allocator holds free with SCRUB_BYTE; returns the bytes
    filled. Each free block is claimed by allocations of its size (the allocator's best fit;
    blocks of the small-allocation pool in pieces small enough to be served from that pool),
    filled, and released again."""
    if device.type != "cuda":
        return 0
    index = device.index if device.index is not None else torch.cuda.current_device()
    pieces = []
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device", index) != index:
            continue
        small = segment.get("segment_type") == "small"
        for block in segment.get("blocks", ()):
            if block.get("state") != "inactive":
                continue
            size = int(block["size"])
            step = _SMALL_REQUEST if small else size
            pieces += [min(step, size - start) for start in range(0, size, step)]
    claimed = []
    filled = 0
    for size in sorted(pieces, reverse=True):
        try:
            block = torch.empty(size, dtype=torch.uint8, device=device)
        except torch.OutOfMemoryError:
            break
        block.fill_(SCRUB_BYTE)
        claimed.append(block)
        filled += size
    del claimed
    return filled


def fingerprints(outputs: Sequence[object]) -> tuple[str, ...]:
    return tuple(fingerprint(o) for o in outputs)


@dataclass
class Watch:
    """What the worker keeps across invocations: what importing the candidate changed, the
    count of streams created, and what measuring under contention and memory needs."""

    import_changes: tuple[StateChange, ...] = ()
    streams: StreamCount = field(default_factory=StreamCount)
    launches: InterpretedLaunches = field(default_factory=InterpretedLaunches)
    folder: str = ""
    """The candidate's folder: autotuners are looked for in the modules loaded from it."""
    memory_at_load: DeviceMemory | None = None
    """The device's memory once the candidate was imported, before any call (CUDA): what a
    call leaves allocated is counted from here."""
    noise: Noise | None = None
    """The side stream and scratch of the noise kernels, made on first use and kept."""
    callers: list[torch.cuda.Stream] = field(default_factory=list)
    """The streams concurrent threads call the candidate on, made on first use and kept."""


def changed_later(
    held: Sequence[tuple[torch.Tensor, ...]], outcomes: Sequence[CallOutcome]
) -> tuple[tuple[int, int], ...]:
    """(call, output) pairs whose device values no longer have the bits they had when the call
    returned."""
    changed = []
    for c, (outputs, outcome) in enumerate(zip(held, outcomes, strict=True)):
        for o, (live, then) in enumerate(zip(outputs, outcome.fingerprints, strict=False)):
            try:
                now = fingerprint(live)
            except Exception:
                changed.append((c, o))
                continue
            if now != then:
                changed.append((c, o))
    return tuple(changed)
