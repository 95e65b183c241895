"""The trusted side of a plain run: write the request, start `plain.caller` in the candidate's
sandbox, and read back a result no larger than the declared outputs can fill."""

from __future__ import annotations

import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kernelaudit.inputs.case import dtype_name
from kernelaudit.runner.auditor.launch import run_python
from kernelaudit.runner.auditor.results import Refused, load_plain, read_bounded
from kernelaudit.runner.boundary.messages import Call, StateChange, TensorArg
from kernelaudit.runner.boundary.state import FLAG_NAMES, FUNCTION_NAMES, RNG_NAMES
from kernelaudit.runner.candidate import CandidateRef

CALLER = Path(__file__).with_name("caller.py")


@dataclass(frozen=True)
class PlainRun:
    """What a plain run brought back: the first and last call's outputs and mutated inputs,
    or why it stopped (`kind`: "load", "exception", "timeout", "crash", "host-memory", "disk",
    "too-large", "bad-result")."""

    calls: int = 0
    seconds: float = 0.0
    first: tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]] = field(default=((), ()))
    last: tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]] = field(default=((), ()))
    error: str = ""
    kind: str = ""
    state_changes: tuple[StateChange, ...] = ()
    """The process-wide state (`runner.boundary.state`: flags, functions, random number generators)
    that differs after the calls from before the candidate was imported, read by the plain
    script (no harness to rebind there)."""


def run_plain(
    candidate: CandidateRef,
    handed: list[Call],
    mutates: tuple[int, ...],
    device: str,
    most_calls: int,
    seconds: float,
    timeout_s: float,
    result_bytes: int,
    host_memory_bytes: int = 0,
) -> PlainRun:
    """Call the candidate the way of the call `handed` over (the one item of the list, taken
    out of it) in a fresh process, again and again until `most_calls` calls or `seconds` have
    gone by. A result file past `result_bytes` is not read; processes holding more than
    `host_memory_bytes` of host memory (0: half of the machine's) are killed.

    The call's tensors are let go once written to the process's request file, not held while
    it runs: a mixture of experts' 21 GiB of weights stayed alive for the whole audit beside
    every case made meanwhile, and the auditor was killed for memory."""
    call = handed.pop()
    request = {
        "path": str(Path(candidate.path).resolve()),
        "function": candidate.function,
        "device": device,
        "args": [a.values if isinstance(a, TensorArg) else a for a in call.args],
        "slots": [(list(s.shape), dtype_name(s.dtype)) for s in call.slots],
        "mutates": list(mutates),
        "most_calls": most_calls,
        "seconds": seconds,
        "state": list(FLAG_NAMES),
        "functions": list(FUNCTION_NAMES),
    }
    with tempfile.TemporaryDirectory() as folder:
        # a copy of its own, so the process is started as `python main.py`, as programs are
        script = Path(folder) / "main.py"
        shutil.copyfile(CALLER, script)
        asked, answer = Path(folder) / "request.pt", Path(folder) / "result.pt"
        torch.save(request, asked)
        del call, request
        done = run_python(
            [script.name, asked.name, answer.name],
            device,
            timeout_s,
            candidate.path,
            folder,
            host_memory_bytes=host_memory_bytes,
            result_bytes=result_bytes,
        )
        kind, why = done.failure(answer.is_file(), timeout_s, "its")
        if kind:
            return PlainRun(error=why, kind=kind)
        # the file is the candidate process's to write: anything may be in it, or be it
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's notes on a file it refuses
                read = read_bounded(answer, result_bytes, "the declared outputs")
                data = _result(load_plain(read))
        except Refused as refused:
            return PlainRun(error=refused.why, kind=refused.kind)
        except Exception as error:
            return PlainRun(
                error=f"its result could not be read ({type(error).__name__}: {error})",
                kind="bad-result",
            )
    if data.get("error"):
        return PlainRun(
            calls=int(data.get("calls", 0)), error=str(data["error"]), kind=data["kind"]
        )
    return PlainRun(
        calls=int(data["calls"]),
        seconds=float(data["seconds"]),
        first=(tuple(data["first"][0]), tuple(data["first"][1])),
        last=(tuple(data["last"][0]), tuple(data["last"][1])),
        state_changes=tuple(
            StateChange(name, before, after)
            for name, (before, after) in data["state"].items()
            if before != after
        ),
    )


def _result(data: object) -> dict:
    """The result file's contents, checked to have the shape `plain.caller` writes."""
    if not isinstance(data, dict):
        raise ValueError(f"a {type(data).__name__}, not the caller's dictionary")
    error = data.get("error")
    if error is not None and not isinstance(error, str):
        raise ValueError("an error that is not text")
    if error:
        if data.get("kind") not in ("load", "exception"):
            raise ValueError("a kind of failure the caller never writes")
        if not isinstance(data.get("calls", 0), int):
            raise ValueError("no count of calls")
        return data
    for which in ("first", "last"):
        kept = data.get(which)
        if not (
            isinstance(kept, (list, tuple))
            and len(kept) == 2
            and all(isinstance(t, torch.Tensor) for part in kept for t in part)
        ):
            raise ValueError(f"no outputs and inputs of the {which} call")
    if not isinstance(data.get("calls"), int) or not isinstance(data.get("seconds"), float):
        raise ValueError("no count of calls and seconds")
    state = data.get("state")
    named = {*FLAG_NAMES, *FUNCTION_NAMES, RNG_NAMES[0]}
    if not (
        isinstance(state, dict)
        and named <= set(state) <= named | set(RNG_NAMES)
        and all(
            isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, str) for x in v)
            for v in state.values()
        )
    ):
        raise ValueError("no process-wide state before and after the calls")
    return data
