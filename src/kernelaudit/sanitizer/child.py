"""The program compute-sanitizer runs: the candidate called on the small cases, nothing else.

`python -m kernelaudit.sanitizer.child REQUEST RESULT` reads the request the auditor wrote with
`write_request` (the candidate's file and function, the device, each case's arguments, built by
the auditor), puts the arguments on the device, imports the candidate and calls it on every
case, synchronising after each call. Only the candidate launches kernels here: the inputs reach
the device by copies, the outputs are bare allocations. With `list_kernels`, one more call runs
under the profiler to list the kernels the candidate launches and the shared memory each uses.
The result is JSON, so a candidate cannot hand objects to the auditor through it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kernelaudit.runner.auditor.results import Refused, read_bounded
from kernelaudit.runner.candidate import CandidateRef, load_candidate
from kernelaudit.sanitizer.cases import Arguments
from kernelaudit.timing.kernels import device_session
from kernelaudit.timing.measure import synchronize

_MESSAGE_CHARS = 2000


@dataclass(frozen=True)
class Launched:
    """A kernel the candidate launched; `shared_bytes` is its static plus dynamic shared memory,
    None when the profiler did not say."""

    name: str
    shared_bytes: int | None


@dataclass(frozen=True)
class ChildResult:
    """What the child reports.

    error: why it could not call the candidate at all ("" when it could).
    failures: calls that raised, one line each ("tail sizes n=513, call 1: RuntimeError: ...").
    kernels: with `list_kernels`, what the candidate launched.
    listing_s: seconds spent listing kernels (not part of running the cases).
    listing_error: why the kernels could not be listed ("" when they were, or were not asked).
    """

    error: str
    failures: tuple[str, ...] = ()
    kernels: tuple[Launched, ...] = ()
    listing_s: float = 0.0
    listing_error: str = ""


def write_request(
    path: Path,
    candidate: CandidateRef,
    cases: Sequence[Arguments],
    device: str,
    calls: int,
    list_kernels: bool,
) -> None:
    torch.save(
        {
            "path": candidate.path,
            "function": candidate.function,
            "autograd": candidate.autograd_argument(),
            "device": device,
            "calls": calls,
            "list_kernels": list_kernels,
            "cases": [
                {"label": c.label, "args": list(c.args), "slots": [list(s) for s in c.slots]}
                for c in cases
            ],
        },
        path,
    )


RESULT_BYTES = 4 << 20
"""The most a child's result may hold: an error, the calls that raised and the kernels it
launched take kilobytes."""


def read_result(path: Path) -> ChildResult | None:
    """The child's result, or None when it wrote none (or wrote something else: a child stopped
    while it wrote leaves JSON cut short). The file lies in a folder the candidate's processes
    write: one that is not a regular file (a link to `/dev/zero`, a pipe), holds more than
    `RESULT_BYTES`, or nests deeper than the parser can follow (which nothing the child writes
    does) is refused (`Refused`)."""
    try:
        read = read_bounded(path, RESULT_BYTES, "a list of the kernels launched")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(read)
    except RecursionError:
        raise Refused("bad-result", "its result nests deeper than any the child writes") from None
    except ValueError:
        return None
    try:
        return ChildResult(
            error=str(data["error"]),
            failures=tuple(str(f) for f in data["failures"]),
            kernels=tuple(
                Launched(
                    str(k["name"]),
                    None if k["shared_bytes"] is None else int(k["shared_bytes"]),
                )
                for k in data["kernels"]
            ),
            listing_s=float(data["listing_s"]),
            listing_error=str(data["listing_error"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def main(argv: Sequence[str]) -> int:
    request_path, result_path = argv
    os.dup2(2, 1)  # whatever the candidate prints goes to stderr
    request = torch.load(request_path, weights_only=True)  # written by the auditor
    device = torch.device(request["device"])
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    cases = [_placed(case, device) for case in request["cases"]]
    ref = CandidateRef(
        request["path"], request["function"], CandidateRef.parse_autograd(request["autograd"])
    )
    try:
        candidate = load_candidate(ref)
    except BaseException as error:
        _write(result_path, error=f"importing {ref.label} failed: {_describe(error)}")
        return 0
    failures = []
    for label, args in cases:
        for call in range(int(request["calls"])):
            try:
                candidate(*args)
                synchronize(device)
            except Exception as error:
                failures.append(f"{label}, call {call + 1}: {_describe(error)}")
                break
    kernels: list[dict[str, Any]] = []
    listing_error = ""
    began = time.perf_counter()
    if request["list_kernels"] and cases and device.type == "cuda":
        try:
            kernels = _launched(lambda: candidate(*cases[0][1]), device)
        except Exception as error:
            listing_error = _describe(error)
    _write(
        result_path,
        failures=failures,
        kernels=kernels,
        listing_s=time.perf_counter() - began,
        listing_error=listing_error,
    )
    return 0


def _placed(case: dict[str, Any], device: torch.device) -> tuple[str, list[object]]:
    """The case's arguments on the device, then its outputs: copies and allocations only, so
    the sanitizer sees no kernel that is not the candidate's."""
    args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in case["args"]]
    slots = [torch.empty(tuple(shape), dtype=dt, device=device) for shape, dt in case["slots"]]
    return str(case["label"]), [*args, *slots]


def _launched(call: Callable[[], object], device: torch.device) -> list[dict[str, Any]]:
    """The kernels one call launches, from the profiler's trace."""
    with device_session() as session:
        call()
        synchronize(device)
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.json"
        session.export_chrome_trace(str(trace))
        return kernels_in_trace(json.loads(trace.read_text()))


def kernels_in_trace(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Every kernel in a Chrome trace written by torch's profiler, with the most shared memory
    it was launched with (the trace's "shared memory": static plus dynamic bytes), None where
    a launch does not say."""
    shared: dict[str, int | None] = {}
    for event in trace.get("traceEvents", ()):
        if event.get("ph") != "X" or str(event.get("cat", "")).lower() != "kernel":
            continue
        name = str(event.get("name", ""))
        value = event.get("args", {}).get("shared memory")
        known = int(value) if isinstance(value, (int, float)) else None
        before = shared.get(name, known)
        shared[name] = None if before is None or known is None else max(before, known)
    return [{"name": name, "shared_bytes": value} for name, value in shared.items()]


def _describe(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    if len(text) > _MESSAGE_CHARS:
        text = text[:_MESSAGE_CHARS] + "..."
    return text


def _write(
    path: str,
    error: str = "",
    failures: Sequence[str] = (),
    kernels: Sequence[dict[str, Any]] = (),
    listing_s: float = 0.0,
    listing_error: str = "",
) -> None:
    data = {
        "error": error,
        "failures": list(failures),
        "kernels": list(kernels),
        "listing_s": listing_s,
        "listing_error": listing_error,
    }
    Path(path).write_text(json.dumps(data))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
