"""The candidate's side of the large case, in a process of its own.

`python -m kernelaudit.large.child REQUEST RESULT` reads the request (JSON, written by
`kernelaudit.large.run`), draws every input directly on the device, calls the candidate once,
and saves only the checked rows: of the inputs as drawn, of the outputs, and of the inputs the
candidate may write as they are after the call. Only plain tensors, numbers and strings come
back (the auditor reads them with `torch.load(weights_only=True)`).

With `--wait` after them it is started ahead of its case (`large.run.Waiting`): it imports
its own modules (torch, and Triton where installed) and then waits for a line on standard
input before it reads the request; nothing of the candidate's is imported, and the device is
not touched, until then. Standard input closed without that line (the auditor gone, or the
case not run): it ends.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from kernelaudit.large.draws import drawn_all
from kernelaudit.runner.boundary.ending import end_now
from kernelaudit.runner.boundary.failures import describe
from kernelaudit.runner.candidate import CandidateRef, load_candidate
from kernelaudit.timing.measure import synchronize


def main(argv: Sequence[str]) -> int:
    request_path, result_path, *mode = argv
    if mode == ["--wait"]:
        if importlib.util.find_spec("triton") is not None:
            importlib.import_module("triton")  # a library's import, paid before the case
        if not sys.stdin.readline():
            return 0
    elif mode:
        raise SystemExit(f"usage: kernelaudit.large.child REQUEST RESULT [--wait]; got {mode}")
    request = json.loads(Path(request_path).read_text())
    device = torch.device(request["device"])
    if device.type == "cuda":
        if device.index is None:  # set_device needs an index: "cuda" means the current one
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    try:
        function = load_candidate(CandidateRef(request["path"], request["function"]))
    except BaseException as error:
        return _failed(result_path, "load", error)
    try:
        args = drawn_all(request["inputs"], device, int(request["seed"]))
        slots = [_slot(spec, device) for spec in request["outputs"]] if request["slots"] else []
        index = torch.tensor(request["rows"], dtype=torch.int64, device=device)
        before = {
            spec["name"]: _rows(arg, spec["dim"], index)
            for spec, arg in zip(request["inputs"], args, strict=True)
            if isinstance(arg, torch.Tensor)
        }
        synchronize(device)
    except BaseException as error:
        return _failed(result_path, "memory" if _out_of_memory(error) else "draw", error)
    began = time.perf_counter()
    try:
        with torch.no_grad():
            returned = function(*args, *slots)
        synchronize(device)
    except BaseException as error:
        return _failed(result_path, "memory" if _out_of_memory(error) else "exception", error)
    seconds = time.perf_counter() - began
    outputs = slots or _returned(returned)
    problem = _contract_problem(outputs, request["outputs"])
    if problem:
        torch.save({"error": problem, "kind": "contract"}, result_path)
        return 0
    try:
        rows = [
            _rows(out, spec["dim"], index)
            for out, spec in zip(outputs, request["outputs"], strict=True)
        ]
        after = {
            spec["name"]: _rows(arg, spec["dim"], index)
            for spec, arg in zip(request["inputs"], args, strict=True)
            if spec["name"] in request["mutates"] and isinstance(arg, torch.Tensor)
        }
    except BaseException as error:
        return _failed(result_path, "exception", error)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    torch.save(
        {
            "error": "",
            "kind": "",
            "inputs": before,
            "outputs": rows,
            "after": after,
            "seconds": seconds,
            "peak_bytes": int(peak),
        },
        result_path,
    )
    return 0


def _slot(spec: dict[str, Any], device: torch.device) -> torch.Tensor:
    """A preallocated output, filled so that rows the candidate never writes show."""
    dtype = getattr(torch, spec["dtype"])
    slot = torch.empty(spec["shape"], dtype=dtype, device=device)
    return slot.fill_(float("nan") if dtype.is_floating_point else 0)


def _rows(tensor: torch.Tensor, dim: int | None, index: torch.Tensor) -> torch.Tensor:
    """The checked rows of `tensor` (all of it where it lacks the grown axis), as a plain,
    contiguous CPU tensor: no subclass or view of the candidate's comes along."""
    picked = tensor.detach()
    if dim is not None:
        picked = picked.index_select(dim, index.to(picked.device))
    copy = torch.empty(tuple(picked.shape), dtype=picked.dtype, device="cpu")
    copy.copy_(picked)
    return copy


def _returned(returned: object) -> list[object]:
    if isinstance(returned, (tuple, list)):
        return list(returned)
    return [returned]


def _contract_problem(outputs: list[object], specs: list[dict[str, Any]]) -> str:
    if len(outputs) != len(specs):
        return f"returned {len(outputs)} value(s) but the problem declares {len(specs)} output(s)"
    for out, spec in zip(outputs, specs, strict=True):
        if not isinstance(out, torch.Tensor):
            return f"returned a {type(out).__name__} for output {spec['name']!r}, not a tensor"
        if list(out.shape) != list(spec["shape"]):
            return (
                f"returned shape {tuple(out.shape)} for output {spec['name']!r}, declared "
                f"{tuple(spec['shape'])}"
            )
    return ""


def _out_of_memory(error: BaseException) -> bool:
    return isinstance(error, (MemoryError, torch.OutOfMemoryError))


def _failed(result_path: str, kind: str, error: BaseException) -> int:
    torch.save({"error": describe(error), "kind": kind}, result_path)
    return 0


if __name__ == "__main__":
    end_now(main(sys.argv[1:]))  # the result is written: no teardown to wait for
