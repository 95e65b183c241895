"""The candidate run under Triton's interpreter with every memory access watched, in a process
of its own: `python -m kernelaudit.interpret.child REQUEST RESULT`.

REQUEST (written by the auditor with `torch.save`) names the candidate and holds the calls to
make (`kernelaudit.runner.boundary.messages.Call`: the logical input values, their layouts, the
output slots) and the names of the problem's inputs and outputs. Every tensor is placed on the CPU
between guard bands, as the worker places them, so an access past a tensor lands in a band
rather than in a neighbour. RESULT is JSON (`Interpretation.to_json`), rewritten after each
call so that what a later call's hang or crash cuts short is not lost.

The environment must hold TRITON_INTERPRET=1 from the start (`run.interpret` sees to it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from kernelaudit.interpret import casts, patches
from kernelaudit.interpret.access import (
    BoundsWatch,
    TritonMissing,
    UnsupportedInterpreter,
    watch_accesses,
)
from kernelaudit.interpret.records import Interpretation, OutOfBounds
from kernelaudit.runner.boundary.ending import end_now
from kernelaudit.runner.boundary.guard import allocate, contiguous_geometry, place, storage_span
from kernelaudit.runner.boundary.messages import Call, TensorArg
from kernelaudit.runner.boundary.poison import PoisonMode, fill_poison
from kernelaudit.runner.candidate import CandidateRef, load_candidate

_ALLOCATED = "a buffer the candidate allocated"


def main(argv: Sequence[str]) -> int:
    request_path, result_path = argv
    began = time.perf_counter()
    # Interpreted kernels are numpy on small blocks: threads cost more than they give, and
    # the auditor's own processes share the machine.
    torch.set_num_threads(1)
    request = torch.load(request_path, weights_only=False)  # written by the auditor
    # an auditor that never collects this run (it stopped early) is not there to end it
    signal.alarm(int(request["alarm_s"]))

    def write(interpretation: Interpretation) -> None:
        seconds = time.perf_counter() - began
        data = interpretation.to_json() | {"seconds": seconds}
        partial = Path(f"{result_path}.partial")
        partial.write_text(json.dumps(data))
        os.replace(partial, result_path)

    try:
        watch = watch_accesses()
    except UnsupportedInterpreter as error:
        cause = "no-triton" if isinstance(error, TritonMissing) else "unsupported"
        write(Interpretation(error=str(error), cause=cause))
        return 0
    autograd = CandidateRef.parse_autograd(str(request.get("autograd", "-")))
    ref = CandidateRef(request["path"], request["function"], autograd)
    try:
        candidate = load_candidate(ref)
    except BaseException as error:
        write(Interpretation(error=f"importing {ref.label}: {_summary(error)}", cause="candidate"))
        return 0
    casts.install()  # Triton's interpreter's float casts a faster way, the same bits
    patches.install()  # and its builtins listed once, the same patches
    found: list[OutOfBounds] = []
    error = ""
    done = 0
    for index, call in enumerate(request["calls"]):
        watch.call = index
        error = _run(candidate, call, index, watch, request["inputs"], request["outputs"], found)
        done = index + 1
        write(_interpretation(watch, found, done, error))
        if error:
            break
    return 0


def _interpretation(
    watch: BoundsWatch, found: list[OutOfBounds], done: int, error: str
) -> Interpretation:
    return Interpretation(
        launches=tuple(watch.launches.items()),
        out_of_bounds=tuple(found),
        calls_done=done,
        error=error,
        cause="candidate" if error else "",
        dropped=watch.dropped,
    )


def _run(
    candidate: Callable[..., object],
    call: Call,
    index: int,
    watch: BoundsWatch,
    input_names: Sequence[str],
    output_names: Sequence[str],
    found: list[OutOfBounds],
) -> str:
    """One call of the candidate; appends what the watch saw to `found` and returns the
    candidate's exception, summarised ("" when it returned)."""
    named: list[tuple[torch.Tensor, str]] = []
    args: list[object] = []
    for position, arg in enumerate(call.args):
        if isinstance(arg, TensorArg):
            guarded = place(f"input {position}", arg.values, arg.layout, "cpu")
            named.append((guarded.view, f"input {input_names[position]}"))
            args.append(guarded.view)
        else:
            args.append(arg)
    slots = []
    for k, slot in enumerate(call.slots):
        stride = contiguous_geometry(tuple(slot.shape)).stride
        guarded = allocate(f"output {k}", tuple(slot.shape), stride, slot.dtype, "cpu")
        fill_poison(guarded.view, call.poison, call.sentinel)
        slots.append(guarded.view)
        named.append((guarded.view, f"output {output_names[k]}"))
    # the candidate's own allocations get guard bands too, and a name once it returns them
    mode = PoisonMode(call.poison, call.sentinel)
    error = ""
    try:
        with mode:
            returned = candidate(*args, *slots)
    except BaseException as raised:
        error = f"call {index + 1}: {_summary(raised)}"
    else:
        outputs = returned if isinstance(returned, (tuple, list)) else (returned,)
        for name, output in zip(output_names, outputs, strict=False):
            if isinstance(output, torch.Tensor) and not slots:
                named.append((output, f"output {name}"))
    named += [(allocation.view, _ALLOCATED) for allocation in mode.allocations]
    found += watch.drain(lambda start, end: _tensor_at(named, start, end))
    return error


def _tensor_at(named: list[tuple[torch.Tensor, str]], start: int, end: int) -> str:
    """The name of the first tensor whose bytes overlap [start, end)."""
    for tensor, name in named:
        if tensor.device.type != "cpu":
            continue
        first = tensor.data_ptr()
        last = first + storage_span(tuple(tensor.shape), tuple(tensor.stride())) * (
            tensor.element_size()
        )
        if first < max(end, start + 1) and start < max(last, first + 1):
            return name
    return ""


_SUMMARY_CHARS = 2000
"""The most of an exception's line a result keeps (a record's size stays bounded)."""


def _summary(error: BaseException) -> str:
    """The exception in one line (its type and message), cut at `_SUMMARY_CHARS`."""
    text = "".join(traceback.format_exception_only(type(error), error)).strip()
    line = text.splitlines()[-1] if text else type(error).__name__
    return line if len(line) <= _SUMMARY_CHARS else line[: _SUMMARY_CHARS - 3] + "..."


if __name__ == "__main__":
    end_now(main(sys.argv[1:]))  # the result is written: no teardown to wait for
